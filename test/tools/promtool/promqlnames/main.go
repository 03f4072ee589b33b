// Command promqlnames reads a JSON array of PromQL expressions on standard
// input and writes, for each, the metric names it selects, or why it does
// not parse: the project's tests check with it that the dashboard and the
// alerts query only series the managers export. It is built from the
// Prometheus module promtool comes from, so both parse PromQL alike.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/promql/parser"
)

// result is what promqlnames says of one expression.
type result struct {
	Expr  string   `json:"expr"`
	Names []string `json:"names,omitempty"`
	Error string   `json:"error,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promqlnames: reading a JSON array of expressions:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	results := make([]result, 0, len(exprs))
	for _, expr := range exprs {
		results = append(results, names(p, expr))
	}
	if err := json.NewEncoder(os.Stdout).Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "promqlnames:", err)
		os.Exit(1)
	}
}

// names parses expr and lists the metric names of its selectors; a selector
// without a plain metric name is an error, since what it selects cannot be
// checked.
func names(p parser.Parser, expr string) result {
	r := result{Expr: expr}
	node, err := p.ParseExpr(expr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			r.Error = fmt.Sprintf("selector %s names no metric", vs)
			return nil
		}
		if !slices.Contains(r.Names, vs.Name) {
			r.Names = append(r.Names, vs.Name)
		}
		return nil
	})
	slices.Sort(r.Names)
	return r
}
