-- The two agents a conversation's context_id belongs to: registered by the
-- first task in it, so a send naming someone else's context is refused
-- (422 context_mismatch) instead of joining their conversation. Contexts of
-- groups are not listed here: mesh_groups owns them.
-- IF NOT EXISTS and INSERT IGNORE so that an interrupted run can be repeated.
CREATE TABLE IF NOT EXISTS task_contexts (
  context_id  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  party_a     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  party_b     VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (context_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- Contexts of existing two-party tasks (party_a sorts before party_b). A
-- context that several pairs shared before this rule is recorded with the
-- smallest ids among them: their tasks stay, naming it again may be refused.
INSERT IGNORE INTO task_contexts (context_id, party_a, party_b, created_at)
SELECT t.context_id, MIN(LEAST(t.initiator, t.recipient)), MIN(GREATEST(t.initiator, t.recipient)), MIN(t.created_at)
FROM tasks t
WHERE t.group_id IS NULL AND NOT EXISTS (SELECT 1 FROM mesh_groups g WHERE g.context_id = t.context_id)
GROUP BY t.context_id;
