-- The send that opens a task (tasks.Service.newTask), as one procedure: the
-- statements of its transaction in one CALL, so the database parses one
-- short text and answers once instead of once per statement (issue 18: at
-- 32 clients the send's eight statements cost the server three times the
-- commit of its two essential INSERTs). START TRANSACTION and COMMIT stay
-- with the caller, which sends them in the same round trip.
--
-- It only ever does what the statements of the pipe path would do when the
-- send goes through: the same rate spend and counter bump, the same send
-- gate (key liveness, blocks, friendship or a shared group, all read with
-- the same share locks in the same order) and the same four INSERTs. Any
-- other outcome raises SQLSTATE 45000 'send_new_task: refused', the caller
-- rolls back and runs the pipe path, which says why (429, 401, 403, ...):
-- every refusal keeps its one implementation in Go, and a procedure that
-- refused too much would cost time, never a wrong answer.
--
-- SQL SECURITY INVOKER: it runs with the application user's DML grant (and
-- EXECUTE, see mysql.EnsureAppUser), not with the migration user's rights.
-- The name carries a version: a procedure is never changed in place; a new
-- one ships in a new migration, under a new name, beside the old one.
-- Agent ids compare as the utf8mb4_bin columns they meet; the caller orders
-- the two agents (p_lo, p_hi) in Go, so no comparison of two parameters
-- depends on a collation.
CREATE PROCEDURE send_new_task_v1(
  IN p_from     VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_to       VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_lo       VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_hi       VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_to_is_lo BOOLEAN,
  IN p_key      VARCHAR(32) CHARACTER SET ascii,
  IN p_now_us   BIGINT,
  IN p_interval BIGINT,
  IN p_tolerance BIGINT,
  IN p_task     VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_status   VARCHAR(16) CHARACTER SET ascii,
  IN p_message  VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_parts    MEDIUMTEXT CHARACTER SET utf8mb4,
  IN p_now      DATETIME(6),
  IN p_event    VARCHAR(40) CHARACTER SET ascii,
  IN p_type     VARCHAR(16) CHARACTER SET ascii,
  IN p_body     MEDIUMTEXT CHARACTER SET utf8mb4,
  IN p_trace    VARCHAR(64) CHARACTER SET ascii,
  IN p_idem     VARCHAR(64) CHARACTER SET utf8mb4,
  IN p_hash     BINARY(32),
  IN p_response MEDIUMTEXT CHARACTER SET utf8mb4)
  SQL SECURITY INVOKER
BEGIN
  DECLARE v_seq BIGINT;
  DECLARE v_lo_epoch, v_hi_epoch, v_live INT;
  DECLARE v_unblocked, v_friends, v_mates BOOLEAN;
  -- identity.TakeRateBumping: the sender's token and the recipient's seq.
  UPDATE rate_limits r STRAIGHT_JOIN inbox_counters c ON c.recipient = p_to
  SET r.tat_us = GREATEST(r.tat_us, p_now_us) + p_interval, c.last_seq = LAST_INSERT_ID(c.last_seq + 1)
  WHERE r.agent_id = p_from AND GREATEST(r.tat_us, p_now_us) + p_interval - p_now_us <= p_tolerance;
  IF ROW_COUNT() <> 2 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'send_new_task: refused';
  END IF;
  SET v_seq = LAST_INSERT_ID();
  -- identity.OpenSendGate.
  SELECT a1.key_epoch, a2.key_epoch, b1.agent_id IS NULL AND b2.agent_id IS NULL, f.agent_id IS NOT NULL,
  (SELECT COUNT(*) FROM api_keys WHERE key_id = p_key AND agent_id = p_from AND revoked_at IS NULL)
  INTO v_lo_epoch, v_hi_epoch, v_unblocked, v_friends, v_live
  FROM agents a1 JOIN agents a2 ON a2.agent_id = p_hi
  LEFT JOIN agent_blocks b1 ON b1.agent_id = p_from AND b1.blocked_id = p_to
  LEFT JOIN agent_blocks b2 ON b2.agent_id = p_to AND b2.blocked_id = p_from
  LEFT JOIN friendships f ON f.agent_id = p_from AND f.friend_id = p_to
  WHERE a1.agent_id = p_lo LOCK IN SHARE MODE;
  IF v_unblocked IS NULL OR NOT v_unblocked OR (p_key <> '' AND v_live <> 1) THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'send_new_task: refused';
  END IF;
  IF NOT v_friends THEN
    SELECT COUNT(*) > 0 INTO v_mates FROM group_members a JOIN group_members b ON b.group_id = a.group_id
    WHERE a.agent_id = p_from AND b.agent_id = p_to LOCK IN SHARE MODE;
    IF NOT v_mates THEN
      SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'send_new_task: refused';
    END IF;
  END IF;
  -- tasks.Service.insertTask: the task (its context is its own id), its
  -- first message, the recipient's event at the seq taken above, and the
  -- idempotency row with its final answer when the client named its message.
  INSERT INTO tasks (task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at)
  VALUES (p_task, p_task, NULL, p_from, p_to, p_status, p_now, p_now);
  INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (p_task, p_message, p_from, p_parts, p_now);
  INSERT INTO outbox_events
  (recipient, seq, event_id, type, sender, task_id, context_id, group_id, message_id, key_epoch, body, trace_id, occurred_at, sent_at)
  VALUES (p_to, v_seq, p_event, p_type, p_from, p_task, p_task, NULL, p_message, IF(p_to_is_lo, v_lo_epoch, v_hi_epoch), p_body, p_trace, p_now, p_now);
  IF p_idem IS NOT NULL THEN
    INSERT INTO idempotency_keys (sender, message_id, request_hash, response, created_at) VALUES (p_from, p_idem, p_hash, p_response, p_now);
  END IF;
END;
