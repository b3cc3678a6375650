-- Which group owns a context_id: a send naming a context must not borrow a
-- group's conversation (tasks.claimContext). One statement alone in its
-- file: MySQL has no CREATE INDEX IF NOT EXISTS. A CREATE INDEX that fails
-- leaves nothing behind, so the file can run again; only a run cut between
-- this statement and the recording of version 5 would need the version
-- recorded by hand (the index is then already there).
CREATE INDEX mesh_groups_context ON mesh_groups (context_id);
