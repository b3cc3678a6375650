package jsonlimit

// LambdaResponseBytes is the most a synchronous Lambda invocation may return
// (6 MB); an API Gateway response is that JSON document, the HTTP body being
// one string field of it.
const LambdaResponseBytes = 6 << 20

// WireSize is an upper bound on how many bytes the JSON text b takes once it
// is carried as a JSON string, as a Lambda proxy response carries its body:
// quotes and backslashes are escaped (2 bytes), control characters and the
// HTML-sensitive <, > and & may become \u00XX (6 bytes). Pages are bounded
// on this size, not on len(b): a body dense in quotes grows by up to 2x.
func WireSize(b []byte) int {
	n := 0
	for _, c := range b {
		switch {
		case c == '"' || c == '\\':
			n += 2
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			n += 6
		default:
			n++
		}
	}
	return n
}
