-- Which group owns a context_id: a send naming a context must not borrow a
-- group's conversation (tasks.contextOwner). One statement alone in its
-- file: MySQL has no CREATE INDEX IF NOT EXISTS, and a failed CREATE INDEX
-- leaves nothing behind, so the file can simply run again.
CREATE INDEX mesh_groups_context ON mesh_groups (context_id);
