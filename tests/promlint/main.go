// promlint reads Prometheus text exposition (format 0.0.4) on stdin, parses it with the Prometheus Go
// library's own parser (github.com/prometheus/common/expfmt) and lints it with the checks of
// `promtool check metrics` (github.com/prometheus/client_golang/prometheus/testutil/promlint).
//
// Exit 0: parsed, no problems (prints "ok: N metric families"). Exit 1: a lint problem per line on stdout
// ("<metric>: <text>"). Exit 2: the text does not parse (the parser's error on stderr).
//
// Built by scripts/promlint.sh into a cache outside the repository; tests/unit/test_promlint.py pipes the
// reconciler's /metrics through it.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func main() {
	text, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "promlint: reading stdin: %v\n", err)
		os.Exit(2)
	}
	families, err := parse(text)
	if err != nil {
		fmt.Fprintf(os.Stderr, "promlint: the text does not parse: %v\n", err)
		os.Exit(2)
	}
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, mf := range families {
		list = append(list, mf)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].GetName() < list[j].GetName() })
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	if err != nil {
		fmt.Fprintf(os.Stderr, "promlint: %v\n", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Printf("%s: %s\n", p.Metric, p.Text)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("ok: %d metric families\n", len(list))
}

func parse(text []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	return parser.TextToMetricFamilies(bytes.NewReader(text))
}
