-- wrk script for bench/serve_bench.sh: POST /predict with a binary body of one sample (the first of
-- $EMBER_SERVE_INPUTS, an `ember eval --predictions` inputs file), optionally paced: each connection
-- waits $EMBER_SERVE_DELAY_MS after an answer before its next request (an open-ish, fixed-rate load
-- while answers are fast), and counts answers other than 200.
local f = assert(io.open(os.getenv("EMBER_SERVE_INPUTS"), "rb"))
local all = f:read("*a")
f:close()
local per = 4 * 13 + 8 * 26
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.body = "EMB1" .. string.char(1, 0, 0, 0) .. all:sub(9, 8 + per)
local pause = tonumber(os.getenv("EMBER_SERVE_DELAY_MS") or "0")
local bad = 0
function delay() return pause end
function response(status, headers, body) if status ~= 200 then bad = bad + 1 end end
function done(summary, latency, requests)
  io.write(string.format("EMBER {\"requests\":%d,\"errors\":%d,\"non200\":%d,\"seconds\":%.3f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}\n",
    summary.requests, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(90) / 1e3,
    latency:percentile(99) / 1e3, latency.max / 1e3))
end
