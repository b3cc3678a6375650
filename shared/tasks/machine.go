package tasks

import "github.com/agentmesh/agentmesh/shared/mesh"

// The move table: for each actor and current state, the states it may move
// the task to. Anything else is an illegal move (409 illegal_transition,
// nothing written). Decisions:
//
//   - the recipient does the work: from submitted it may start (working), ask
//     (input-required), finish (completed, failed) or decline (rejected);
//     rejected is only a first answer, not a way out of accepted work;
//   - either side may cancel a task that is not terminal;
//   - the initiator answers input-required by moving the task back to
//     working (its answer, if any, goes in the move's message or in a reply;
//     a reply alone never changes the status). The recipient may also resume
//     (input-required -> working) once it has what it needs;
//   - no move to the current state and none to submitted; terminal states
//     (completed, failed, canceled, rejected) have no moves at all.
var moves = map[string]map[string][]string{
	RoleRecipient: {
		mesh.TaskSubmitted:     {mesh.TaskWorking, mesh.TaskInputRequired, mesh.TaskCompleted, mesh.TaskFailed, mesh.TaskRejected, mesh.TaskCanceled},
		mesh.TaskWorking:       {mesh.TaskInputRequired, mesh.TaskCompleted, mesh.TaskFailed, mesh.TaskCanceled},
		mesh.TaskInputRequired: {mesh.TaskWorking, mesh.TaskCompleted, mesh.TaskFailed, mesh.TaskCanceled},
	},
	RoleInitiator: {
		mesh.TaskSubmitted:     {mesh.TaskCanceled},
		mesh.TaskWorking:       {mesh.TaskCanceled},
		mesh.TaskInputRequired: {mesh.TaskWorking, mesh.TaskCanceled},
	},
}

// States lists every task state.
var States = []string{
	mesh.TaskSubmitted, mesh.TaskWorking, mesh.TaskInputRequired,
	mesh.TaskCompleted, mesh.TaskFailed, mesh.TaskCanceled, mesh.TaskRejected,
}

func validState(s string) bool {
	for _, v := range States {
		if v == s {
			return true
		}
	}
	return false
}

// CanMove reports whether an agent in role may move a task from one state to
// another.
func CanMove(role, from, to string) bool {
	for _, s := range moves[role][from] {
		if s == to {
			return true
		}
	}
	return false
}
