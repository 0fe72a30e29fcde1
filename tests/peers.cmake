# Smoke test of the peer benchmarks (bench/peers/): torch_embeddingbag.py --quick and a check of
# its JSON lines. It skips (exit 77) unless torch imports in the chosen interpreter, which only
# bench/peers/setup.sh provides: the test suite never installs anything nor uses the network.
add_test(NAME bench.peers_smoke COMMAND bash ${PROJECT_SOURCE_DIR}/bench/peers/smoke.sh)
set_tests_properties(bench.peers_smoke PROPERTIES LABELS bench TIMEOUT 300 SKIP_RETURN_CODE 77)
