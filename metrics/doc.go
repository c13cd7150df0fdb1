// Package metrics holds VeloMetrics: the Prometheus families that velo
// records, with the names, labels and types that the Rust reference
// (ai-dynamo/velo) uses, and a few of its own (docs/metrics.md).
//
// Register puts every family into a registry that the caller owns. Velo
// never uses the global registry and never runs an exporter: serve or
// scrape the registry with your own code (for example promhttp.HandlerFor).
//
// Hot paths record through handles bound once. Transport returns an
// ext.Observability whose series were all created up front (a dashboard
// sees every transport series at zero), so recording is an array index and
// an atomic add. The families with many label sets that a node mostly
// never meets (handler × response type × outcome, stream operation ×
// outcome × scheme, rendezvous operations) are bound one label set at a
// time, on its first record, and the handle kept: an idle node scrapes a
// few hundred samples, not thousands. A nil *VeloMetrics gives the no-op
// handle, so a node without metrics pays nothing.
package metrics
