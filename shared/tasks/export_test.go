package tasks

// The statements, limits and checks the external tests (package tasks_test,
// which may import the adapter taskshttp) inspect directly.
const (
	BlockedBySQL       = blockedBySQL
	BlockersOfSQL      = blockersOfSQL
	FailTasksSQL       = failTasksSQL
	GetTaskSQL         = getTaskSQL
	GroupOfContextSQL  = groupOfContextSQL
	GroupOthersSQL     = groupOthersSQL
	IdleCandidatesSQL  = idleCandidatesSQL
	InsertMessageSQL   = insertMessageSQL
	InsertTaskSQL      = insertTaskSQL
	ListAsEitherSQL    = listAsEitherSQL
	ListAsInitiatorSQL = listAsInitiatorSQL
	ListAsRecipientSQL = listAsRecipientSQL
	LockIdleSQL        = lockIdleSQL
	LockTaskSQL        = lockTaskSQL
	MemberGroupSQL     = memberGroupSQL
	MessagesReadBatch  = messagesReadBatch
	OldIdemKeysSQL     = oldIdemKeysSQL
)

var (
	IDPattern    = idPattern
	InList       = inList
	ValidatePart = validatePart
)

// SetMaxA2AReuses lowers the bound on a reused A2A messageId's chain for a
// test; the returned func restores it.
func SetMaxA2AReuses(n int) func() {
	old := maxA2AReuses
	maxA2AReuses = n
	return func() { maxA2AReuses = old }
}
