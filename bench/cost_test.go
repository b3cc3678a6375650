package bench

import (
	"fmt"
	"strings"
	"testing"
)

// AWS list prices, us-east-1 (the figures the cost table is computed from;
// README.md's "Push delivery: cost per agent" shows the same table).
const (
	priceLambdaGBs   = 0.0000133334 // $ per GB-second, arm64
	priceLambdaReq   = 0.20 / 1e6   // $ per invocation
	priceHTTPReq     = 1.00 / 1e6   // $ per HTTP API request
	priceWSMessage   = 1.00 / 1e6   // $ per WebSocket message (32 KB units)
	priceWSConnMin   = 0.25 / 1e6   // $ per WebSocket connection-minute
	priceMSKBrokerH  = 0.21         // $ per kafka.m5.large broker-hour (public access needs m5.large or larger)
	priceTransferOut = 0.09         // $ per GB out to the internet
)

// The usage the table assumes, from meshd's and the template's defaults.
const (
	costMonthSeconds = 30 * 24 * 3600
	costMonthMinutes = costMonthSeconds / 60
	costMemoryGB     = 0.25  // template.yaml Globals MemorySize 256
	costShortRun     = 0.050 // s: a short function run (heartbeat, token, $connect, a page of the inbox)
	costRelayPost    = 0.020 // s of the relay per @connections POST
	costHeartbeat    = 30    // s: meshd's HeartbeatEvery default, every mode
	costTokenEvery   = 3600  // s: token TTL, one exchange per hour
	costPollWait     = 20    // s: meshd's PollWait, the Lambda held per long poll
	costPingEvery    = 300   // s: meshd's DefaultPushPingEvery
	costConnAge      = 7200  // s: API Gateway's 2 h connection limit, one reconnect each
	costMSKBrokers   = 3     // one broker per AZ
	costRecordKB     = 1.0   // a record as meshd receives it
)

// costLine is one line of the cost table: what, the arithmetic, $.
type costLine struct{ what, how string }

func usd(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("$%.0f", v)
	case v >= 1:
		return fmt.Sprintf("$%.2f", v)
	case v >= 0.01:
		return fmt.Sprintf("$%.3f", v)
	default:
		return fmt.Sprintf("$%.4f", v)
	}
}

// shortRuns is the cost of n short function runs behind the HTTP API (or
// not: http false).
func shortRuns(n float64, http bool) float64 {
	c := n*priceLambdaReq + n*costShortRun*costMemoryGB*priceLambdaGBs
	if http {
		c += n * priceHTTPReq
	}
	return c
}

// costIdle is each mode's idle cost per agent per month, and the common part.
type costIdle struct {
	common, push, poll, kafkaPerBroker float64
	lines                              []costLine
}

func idleCosts() costIdle {
	var c costIdle
	add := func(what, how string) { c.lines = append(c.lines, costLine{what, how}) }

	hb := float64(costMonthSeconds / costHeartbeat)
	tok := float64(costMonthSeconds / costTokenEvery)
	c.common = shortRuns(hb+tok, true)
	add("Every mode: heartbeats and token exchanges", fmt.Sprintf("(%s heartbeats (every %d s) + %s tokens (hourly)) × ($1.00 + $0.20 per M + %.0f ms × 256 MB) = **%s**",
		commas(int64(hb)), costHeartbeat, commas(int64(tok)), costShortRun*1000, usd(c.common)))

	connMin := float64(costMonthMinutes) * priceWSConnMin
	pings := float64(costMonthSeconds/costPingEvery) * priceWSMessage
	reconnects := float64(costMonthSeconds / costConnAge)
	// Each reconnect: $connect and $disconnect runs, and a catch-up page
	// of the inbox API.
	recon := shortRuns(2*reconnects, false) + shortRuns(reconnects, true)
	c.push = connMin + pings + recon
	add("Push", fmt.Sprintf("%s connection-minutes × $0.25/M = %s; + %s pings (every 5 min) counted as messages × $1.00/M = %s (an upper bound: pings are control frames); + %s reconnects (2 h limit) × ($connect + $disconnect + a catch-up inbox page) = %s; total **%s**",
		commas(costMonthMinutes), usd(connMin), commas(int64(costMonthSeconds/costPingEvery)), usd(pings), commas(int64(reconnects)), usd(recon), usd(c.push)))

	polls := float64(costMonthSeconds / costPollWait)
	gbs := polls * costPollWait * costMemoryGB
	c.poll = polls*(priceHTTPReq+priceLambdaReq) + gbs*priceLambdaGBs
	add("Poll", fmt.Sprintf("%s long polls (one per %d s) × ($1.00 + $0.20)/M = %s; + one 256 MB Lambda held %d s per poll = %s GB-s (%s GB-s a day) × $0.0000133334 = %s; total **%s**",
		commas(int64(polls)), costPollWait, usd(polls*(priceHTTPReq+priceLambdaReq)), costPollWait, commas(int64(gbs)), commas(int64(gbs/30)), usd(gbs*priceLambdaGBs), usd(c.poll)))

	c.kafkaPerBroker = priceMSKBrokerH * costMonthSeconds / 3600
	add("Kafka", fmt.Sprintf("no function runs per agent; the cluster: %d × kafka.m5.large × $%.2f/h × 720 h = **%s a month**, whatever the agents (÷ 1,000 agents = %s, ÷ 10,000 = %s each), plus storage ($0.10/GB-month) and data out",
		costMSKBrokers, priceMSKBrokerH, usd(costMSKBrokers*c.kafkaPerBroker), usd(costMSKBrokers*c.kafkaPerBroker/1000), usd(costMSKBrokers*c.kafkaPerBroker/10000)))
	return c
}

// perMillion is each mode's cost per million messages delivered (the send
// itself, common to every mode, apart).
type perMillion struct {
	send, pushLow, pushHigh, poll, kafka float64
}

func messageCosts() perMillion {
	const m = 1e6
	var p perMillion
	p.send = shortRuns(m, true)
	relayRun := m * costRelayPost * costMemoryGB * priceLambdaGBs
	// The dispatcher invokes the relay once per round of up to 500 records
	// (push.DefaultSenderBatch) at best, once per record at worst.
	p.pushLow = m*priceWSMessage + relayRun + m/500*priceLambdaReq
	p.pushHigh = m*priceWSMessage + relayRun + m*priceLambdaReq
	p.poll = shortRuns(m, true)
	p.kafka = m * costRecordKB / 1e6 * priceTransferOut // 1 GB = 10^6 KB
	return p
}

// writeCost writes the cost table (report.md and README.md show it).
func writeCost(w func(string, ...any), perConnKiB float64) {
	c := idleCosts()
	p := messageCosts()
	cluster := costMSKBrokers * c.kafkaPerBroker
	w("| Mode | Idle, per agent per month (with the %s common to every mode) | Per million messages delivered | Limits |\n|---|---|---|---|\n", usd(c.common))
	w("| Push (WebSocket API) | %s + %s = **%s** | %s – %s | no quota on open connections; 500 new connections/s per account and region (meshd spreads reconnects over 30 s) |\n",
		usd(c.push), usd(c.common), usd(c.push+c.common), usd(p.pushLow), usd(p.pushHigh))
	w("| Poll (`GET /v1/inbox`, 20 s long poll) | %s + %s = **%s** | ≤ %s | each idle agent holds a Lambda: the 1,000 concurrent executions default quota caps the polling agents at about 1,000 |\n",
		usd(c.poll), usd(c.common), usd(c.poll+c.common), usd(p.poll))
	w("| Kafka (MSK, public access) | %s a month for the cluster + %s per agent (%s per agent at 1,000 agents, %s at 10,000) | ≈ %s (data out) | MSK public access needs kafka.m5.large or larger brokers and IAM credentials for each agent |\n\n",
		usd(cluster), usd(c.common), usd(cluster/1000+c.common), usd(cluster/10000+c.common), usd(p.kafka))
	w("Sending, common to every mode: %s per million (`POST /v1/messages`: $1.00 HTTP API + $0.20 invocations + %.0f ms × 256 MB).\n\n", usd(p.send), costShortRun*1000)
	w("How each figure is computed (us-east-1 list prices: Lambda arm64 $0.0000133334/GB-s and $0.20/M requests, HTTP API $1.00/M requests, WebSocket API $1.00/M messages of 32 KB and $0.25/M connection-minutes, MSK kafka.m5.large about $0.21/h per broker; a 30-day month; every function at the template's 256 MB; a short function run %.0f ms):\n\n", costShortRun*1000)
	for _, l := range c.lines {
		w("- %s: %s.\n", l.what, l.how)
	}
	w("- Per million messages: push = 1,000,000 WebSocket messages × $1.00/M + the relay (outside the VPC, invoked by the dispatcher with Lambda Invoke): %.0f ms × 256 MB per record = %s, and one invocation per round of up to 500 records ($0.0004) to one per record ($0.20). Poll = at most one extra inbox request per message (a message ends a long poll early; a busy inbox is read 100 a page), %s. Kafka = the broker-hours above, nothing per message but data out: 1 KB × 1 M = 1 GB × $0.09.\n",
		costRelayPost*1000, usd(1e6*costRelayPost*costMemoryGB*priceLambdaGBs), usd(p.poll))
	w("- With push, the heartbeats (%s) cost %.0f× the push channel itself (%s): an agent's open connection already shows it is there, so heartbeats are where a pushed agent's idle cost would come down.\n", usd(c.common), c.common/c.push, usd(c.push))
	w("- Not per agent: the push janitor (rate(5 minutes): 8,640 runs a month, about %s), the dispatcher and the presence scanner run whatever the mode.\n", usd(shortRuns(8640, false)))
	if perConnKiB > 0 {
		w("- On AWS, API Gateway holds the connections; locally (meshlocal) each idle connection costs the serving process %.0f KiB (measured above).\n", perConnKiB)
	}
	w("\n")
}

// TestCostArithmetic pins the cost table's figures to the arithmetic the
// brief states (21,600 GB-s a day of polling is $8.64 a month).
func TestCostArithmetic(t *testing.T) {
	c := idleCosts()
	tests := []struct {
		name      string
		got, want float64
	}{
		{"a polling agent costs its 648,000 GB-s and 129,600 requests a month", c.poll, 648_000*priceLambdaGBs + 129_600*1.2e-6},
		{"a pushed agent costs its 43,200 connection-minutes, 8,640 pings and 360 reconnects", c.push,
			43_200*priceWSConnMin + 8_640*priceWSMessage + 360*(3*priceLambdaReq+3*costShortRun*costMemoryGB*priceLambdaGBs+priceHTTPReq)},
		{"the MSK cluster costs $453.60 a month", costMSKBrokers * c.kafkaPerBroker, 453.6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := tt.got - tt.want; d > 1e-9 || d < -1e-9 {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	var b strings.Builder
	writeCost(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) }, 0)
	if !strings.Contains(b.String(), "$8.80") {
		t.Errorf("the table does not show poll's $8.80 a month:\n%s", b.String())
	}
}
