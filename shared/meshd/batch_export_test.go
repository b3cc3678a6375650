package meshd

import "testing"

// CrashBeforeMark makes every mark under stateDir call crash first: a
// non-nil error from it stands for the process dying after the handler
// succeeded and before the mark was durable. Tests using it do not run in
// parallel.
func CrashBeforeMark(t testing.TB, stateDir string, crash func(seq int64) error) {
	crashBeforeMark = func(dir string, seq int64) error {
		if dir != stateDir {
			return nil
		}
		return crash(seq)
	}
	t.Cleanup(func() { crashBeforeMark = nil })
}
