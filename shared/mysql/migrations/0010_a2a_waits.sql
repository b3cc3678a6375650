-- The A2A gateway's per-caller cap on waiting calls (issue 17): a blocking
-- SendMessage or an open stream (SendStreamingMessage, SubscribeToTask)
-- holds one of its calling agent's slots (a2agw.Gateway.MaxWaits), across
-- every function instance, and frees it when it answers. Mirrors
-- inbox_polls: each take and free is one autocommitted statement on the
-- primary key, nothing is locked while the call waits, and a row expires
-- on its own (the wait's bound plus a grace), so an instance that dies
-- while holding a slot cannot keep it. Own table, not inbox_polls: the A2A
-- waits must not take the slots the agent's own meshd long-polls with.
-- IF NOT EXISTS so that an interrupted run can be repeated.
CREATE TABLE IF NOT EXISTS a2a_waits (
  agent_id    VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  slot        INT NOT NULL,
  holder      VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  expires_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (agent_id, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;
