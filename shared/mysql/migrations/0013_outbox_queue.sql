-- The dispatcher's queue: one row per event it has yet to publish, deleted
-- when the event reaches Kafka (issue 18: the relay at 20% of raw produce).
--
-- Until now an event was pending by its delivery column, found through the
-- index outbox_pending (delivery, recipient, seq), and the dispatcher settled
-- each published row with an UPDATE of delivery and sent_at, which moved the
-- row in both of the table's (delivery, ...) indexes: 10,000 events over 50
-- recipients took 120-150 ms to settle alone (230-420 ms inside the relay).
-- Deleting the same events' rows here, a narrow table whose key is the
-- range the dispatcher reads, takes 16-27 ms. So an event now carries its
-- final delivery from the start ('sent', or 'failed' when the dispatcher
-- dead-letters it) and its sent_at is its occurred_at: retention counts
-- from the event's time. The event is pending while its row is here.
--
-- Rows written with delivery = 'pending' (by a function of the previous
-- version still running while a deploy switches over, or by a redrive) are
-- found through outbox_pending as before: the dispatcher moves them here,
-- under the recipient's lock, before it reads the recipient's queue. That
-- is also why the index stays.
CREATE TABLE outbox_queue (
  recipient  VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  seq        BIGINT NOT NULL,
  PRIMARY KEY (recipient, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci;

-- send_new_task_v1 (0012) with the event written as above: delivery 'sent'
-- (outbox.SentDelivery) and a queue row. v1 stays for the functions of the
-- previous version until they are replaced; its events are found as
-- pending ones and queued by the dispatcher.
CREATE PROCEDURE send_new_task_v2(
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
  -- first message, the recipient's event at the seq taken above (queued for
  -- the dispatcher, outbox.Append), and the idempotency row with its final
  -- answer when the client named its message.
  INSERT INTO tasks (task_id, context_id, group_id, initiator, recipient, status, created_at, updated_at)
  VALUES (p_task, p_task, NULL, p_from, p_to, p_status, p_now, p_now);
  INSERT INTO task_messages (task_id, message_id, sender, parts, created_at) VALUES (p_task, p_message, p_from, p_parts, p_now);
  INSERT INTO outbox_events
  (recipient, seq, event_id, type, sender, task_id, context_id, group_id, message_id, key_epoch, body, trace_id, occurred_at, sent_at, delivery)
  VALUES (p_to, v_seq, p_event, p_type, p_from, p_task, p_task, NULL, p_message, IF(p_to_is_lo, v_lo_epoch, v_hi_epoch), p_body, p_trace, p_now, p_now, 'sent   ');
  INSERT INTO outbox_queue (recipient, seq) VALUES (p_to, v_seq);
  IF p_idem IS NOT NULL THEN
    INSERT INTO idempotency_keys (sender, message_id, request_hash, response, created_at) VALUES (p_from, p_idem, p_hash, p_response, p_now);
  END IF;
END;
