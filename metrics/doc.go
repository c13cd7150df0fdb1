// Package metrics holds VeloMetrics: the Prometheus families that velo
// records, with the names, labels and types that the Rust reference
// (ai-dynamo/velo) uses, and a few of its own (docs/metrics.md).
//
// Register puts every family into a registry that the caller owns. Velo
// never uses the global registry and never runs an exporter: serve or
// scrape the registry with your own code (for example promhttp.HandlerFor).
//
// Hot paths use pre-bound handles. Transport returns an ext.Observability
// whose series were all created up front, so recording is an array index
// and an atomic add. A nil *VeloMetrics gives the no-op handle, so a node
// without metrics pays nothing.
package metrics
