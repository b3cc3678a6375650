package retention

// The statements the external tests check the plans of: each select walks
// its index, each lock and delete goes by primary key only.
var (
	Selects = map[string]string{
		"oldTasks":       oldTasksSQL,
		"oldContexts":    oldContextsSQL,
		"friendRequests": friendRequestsSQL.sel,
		"sessions":       sessionsSQL.sel,
		"revokedKeys":    revokedKeysSQL.sel,
	}
	ByPrimaryKey = map[string]string{
		"lockTasks":      lockTasksSQL,
		"deleteTasks":    deleteTasksSQL,
		"lockContexts":   lockContextsSQL,
		"deleteContexts": deleteContextsSQL,
		"friendRequests": friendRequestsSQL.del,
		"sessions":       sessionsSQL.del,
		"revokedKeys":    revokedKeysSQL.del,
		"audit":          auditDeleteSQL,
		"messages":       children[0].del,
		"artifacts":      children[1].del,
	}
	Expand = expand
)
