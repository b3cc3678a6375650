// Package buildcheck holds no code, only tests of the function binaries as
// Lambda runs them: what each one links (an HTTP function never links the
// Kafka client), that all of them build with the deploy flags for arm64, and
// that a built bootstrap answers under the AWS Lambda Runtime Interface
// Emulator (infra/rie.sh, also behind `make invoke`).
package buildcheck
