// Package proxy is an OpenAI-compatible HTTP front for a small fleet of vLLM
// engines that load KV blocks from each other through kvp2p: for trials, and
// for users with no prefix-aware router. It speaks /v1/completions and
// /v1/chat/completions (JSON or server-sent events), answers /v1/models
// from an engine and /health from every engine's /health.
//
// Two modes:
//
//   - Symmetric (ModeSymmetric): every engine serves whole requests. The
//     proxy picks one by load (PickLeastLoaded: fewest requests in flight
//     through this proxy, ties broken round-robin; or PickRoundRobin). With a
//     Locator it also names the source itself: when the Locator says another
//     engine probably holds the prompt's prefix, the request carries
//     kv_transfer_params {"remote_kv_source": {remote_host, remote_port,
//     kv_request_id, remote_domain}} naming that engine's kvp2p sidecar, and
//     the engine probes it (the peer's answer decides, a miss prefills
//     locally). Under PickLeastLoaded a holder among the least loaded is
//     picked itself, so that its own prefix cache serves. Without a Locator
//     the proxy names no source: the engines find the prefix themselves, or
//     recompute it.
//   - Prefill/decode (ModePD): a prefiller, picked by load, runs the prompt
//     with max_tokens 1, stream off and {"remote_decoder": {kv_request_id}};
//     once it answers, a decoder, picked by load, runs the client's request
//     with {"remote_prefiller": {remote_host, remote_port, kv_request_id,
//     remote_domain}} naming the prefiller's sidecar, plus whatever other
//     kv_transfer_params the prefiller's response returned. The decoder's
//     response is the client's.
//
// The proxy allocates every kv_request_id. A client's own kv_transfer_params
// pass through untouched in symmetric mode (the proxy then names nothing);
// in PD mode they are refused, since the proxy owns both legs' roles.
//
// Responses are relayed as they arrive: each read from the engine is written
// and flushed to the client at once, so a stream's events are never held
// back. A client that goes away cancels the request's context, which aborts
// every leg in flight (vLLM aborts a request whose connection closes); a PD
// request's decode leg never starts once its client is gone.
//
// Failures: a body that is not a JSON object, lacks its prompt or messages,
// or has fields of the wrong type answers 400; a body over
// Config.MaxBodyBytes 413; another method 405; another path 404. An engine
// that cannot be reached answers 502, one that does not answer within
// Config.LegTimeout 504; an engine's own error status and body are relayed
// as they are. Errors have OpenAI's shape: {"error": {"message", "type",
// "code"}}.
//
// A Proxy is an http.Handler safe for concurrent use; it starts no
// goroutine that outlives a request. Close releases its idle connections.
package proxy
