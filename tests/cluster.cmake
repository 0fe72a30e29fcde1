# The cluster on one machine (scripts/cluster.sh): 2 network-namespace hosts x 2 ranks, Open MPI
# over TCP only, links shaped to 1 Gbit/s. The distributed-equals-single-process cases and
# `ember train` across hosts, 2D with a sharding group per host, and a host whose link is cut
# mid-run. Each test brings up a cluster of its own and takes it down; they run one at a time (4
# ranks on CI's 2 cores). Where the machine cannot create network namespaces they report
# "Skipped" with the reason (which scripts/test.sh also prints). Open MPI only: the launcher agent
# is Open MPI's rsh mechanism. cluster.teardown runs after them (a fixture's cleanup: also after a
# failure or a TIMEOUT) and takes down, reports and fails on whatever a killed test left behind
# (tests/cluster/teardown.sh).
if(EMBER_MPI_FAMILY STREQUAL "Open MPI")
  # Cluster names and subnets of their own per build directory (release and sanitize, or the
  # builds of two checkouts, may run at once): c<test><3 hex digits of the build directory's
  # hash>, subnet 10.<64 + a byte of the hash mod 128>.<test>.
  string(MD5 cluster_hash "${PROJECT_BINARY_DIR}")
  string(SUBSTRING "${cluster_hash}" 0 3 cluster_tag)
  string(SUBSTRING "${cluster_hash}" 3 2 cluster_byte)
  math(EXPR cluster_octet "64 + 0x${cluster_byte} % 128")
  set(cluster_net 10.${cluster_octet})
  set(cluster_env "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  if(EMBER_SANITIZE)
    list(APPEND cluster_env "ASAN_OPTIONS=detect_leaks=0")
  endif()
  # The scripts stop a run after this many seconds, under the TIMEOUT, and still clean up.
  set(cluster_timeout 300)
  math(EXPR cluster_limit "${cluster_timeout} - 60")
  list(APPEND cluster_env "EMBER_CLUSTER_LIMIT_S=${cluster_limit}")
  set(cluster_n 0)
  set(cluster_names "")
  function(ember_cluster_test name)
    math(EXPR n "${cluster_n} + 1")
    set(cluster_n ${n} PARENT_SCOPE)
    set(cluster_names ${cluster_names} c${n}${cluster_tag} PARENT_SCOPE)
    string(REPLACE "@NAME@" "c${n}${cluster_tag}" argv "${ARGN}")
    string(REPLACE "@NET@" "${cluster_net}.${n}" argv "${argv}")
    add_test(NAME cluster.${name} COMMAND ${argv})
    set_tests_properties(cluster.${name} PROPERTIES TIMEOUT ${cluster_timeout} LABELS "dist;cluster" PROCESSORS 2
                         RESOURCE_LOCK ember_cluster SKIP_RETURN_CODE 77 FIXTURES_REQUIRED ember_cluster
                         ENVIRONMENT "${cluster_env};EMBER_TEST_DATA=${CMAKE_CURRENT_SOURCE_DIR}/data")
  endfunction()
  set(run ${CMAKE_CURRENT_SOURCE_DIR}/cluster/run.sh @NAME@ @NET@ 2 2 4 1gbit)
  foreach(scheme dp tw cw rw twrw grid mixed planned)
    ember_cluster_test(dist.${scheme}.mean ${run} $<TARGET_FILE:test_shard> --scheme ${scheme} --pool mean)
  endforeach()
  foreach(scheme rw mixed)
    ember_cluster_test(dist.${scheme}.sum ${run} $<TARGET_FILE:test_shard> --scheme ${scheme} --pool sum)
  endforeach()
  ember_cluster_test(dist.rw.none ${run} $<TARGET_FILE:test_shard> --scheme rw --pool none)
  ember_cluster_test(dist.checkpoint.reshard ${run} $<TARGET_FILE:test_shard> --scheme mixed --pool mean --reshard)
  # 2D: a sharding group per host, the replicas' sums across the hosts' link.
  ember_cluster_test(dist.2d.mixed.mean ${run} $<TARGET_FILE:test_shard> --scheme mixed --pool mean --group 2)
  ember_cluster_test(dist.2d.checkpoint ${run} $<TARGET_FILE:test_shard> --scheme mixed --pool mean --reshard --group 2)
  ember_cluster_test(dist.2d.overlap ${run} $<TARGET_FILE:test_overlap> --group 2)
  ember_cluster_test(train.loss_curve ${run} $<TARGET_FILE:test_train> --backend sebc --case loss_curve)
  foreach(case equal cut)
    ember_cluster_test(train.cli.${case} ${CMAKE_CURRENT_SOURCE_DIR}/cluster/train.sh ${case} $<TARGET_FILE:ember_cli> @NAME@ @NET@)
  endforeach()
  add_test(NAME cluster.teardown COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cluster/teardown.sh ${cluster_names})
  set_tests_properties(cluster.teardown PROPERTIES TIMEOUT 120 LABELS "dist;cluster" RESOURCE_LOCK ember_cluster
                       SKIP_RETURN_CODE 77 FIXTURES_CLEANUP ember_cluster)
endif()
