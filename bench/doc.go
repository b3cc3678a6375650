// Package bench measures Agent Mesh beside its peers in one run against the
// same MariaDB and Kafka broker, and writes bench/report.md (make bench).
package bench
