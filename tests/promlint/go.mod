// A `promtool check metrics` of our own: the Prometheus text parser (expfmt) and linter (promlint) of the Go
// client library, pinned here and built by scripts/promlint.sh into a cache outside the repository.
module kubectl-runs.test/promlint

go 1.25.0

require (
	github.com/prometheus/client_golang v1.24.0
	github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common v0.70.0
)

require (
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
