package dispatch

// SetSettleFault makes fault run where every settle of d starts, in the
// batch's transaction and in the one that settles it again after a failure;
// an error it returns fails that settle. For tests only.
func SetSettleFault(d *Dispatcher, fault func() error) { d.settleFault = fault }
