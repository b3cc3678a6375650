package dispatch

// SetSettleFault makes fault run where every settle of d starts, in the
// batch's transaction and in the one that settles it again after a failure;
// an error it returns fails that settle. For tests only.
func SetSettleFault(d *Dispatcher, fault func() error) { d.settleFault = fault }

// SetAssumedSettled makes hook run once the settle a batch writes during its
// publish has returned, before the publish is waited for. For tests only.
func SetAssumedSettled(d *Dispatcher, hook func()) { d.assumedSettled = hook }

// MarkSentChunk is how many rows one settle statement marks at most.
const MarkSentChunk = markSentChunk
