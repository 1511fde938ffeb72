"""What the repo's tests, benches and demo share; not part of the wheel.

One import path per thing:

- `devtools.answers`: the providers' canned answers and wire formats (SSE, AWS event stream)
- `devtools.deployments`: LiteLLM deployments pointing at a mock, `twin_models`, `served_by_rust`
- `devtools.mock_provider`: the fast mock provider (`python -m devtools.mock_provider --port 0`)
- `devtools.media_sink`: a Bedrock upstream that hashes each body and keeps none (media benches)
- `devtools.upstream`: `RecordingUpstream`, a recording, scriptable upstream in the test's process
- `devtools.realtime`: `RealtimeUpstream`, a WebSocket provider for `/v1/realtime`
- `devtools.processes`: `ProxyProcess` (the real LiteLLM proxy) and `ServerProcess` (a mock)
- `devtools.proxy_logger`: a proxy callback recording LiteLLM's logged events; `logged_proxy`
- `devtools.procfs`: `/proc` readers (process trees, RSS, CPU time) and `Sampler`
- `devtools.polling`: `wait_until`, for waiting on a state instead of sleeping
- `devtools.demo`: `make demo`
"""
