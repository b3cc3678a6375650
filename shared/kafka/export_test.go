package kafka

import "time"

// SetOnUnknownTopic sets the test hook of TopicMaxMessageBytes; nil removes it.
func SetOnUnknownTopic(f func()) { onUnknownTopic = f }

// SetTopicAppearWait sets how long TopicMaxMessageBytes waits for an
// unknown topic and returns what restores it.
func SetTopicAppearWait(d time.Duration) (restore func()) {
	old := topicAppearWait
	topicAppearWait = d
	return func() { topicAppearWait = old }
}
