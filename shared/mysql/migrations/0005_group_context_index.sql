-- Which group owns a context_id: a send naming a context must not borrow a
-- group's conversation (tasks.claimContext). MySQL has no CREATE INDEX
-- IF NOT EXISTS: a run cut after this statement runs it again, and the
-- runner counts "duplicate key name" as done (mysql.alreadyApplied).
CREATE INDEX mesh_groups_context ON mesh_groups (context_id);
