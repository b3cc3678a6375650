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
