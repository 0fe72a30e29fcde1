ember_unit_test(plan ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_plan.c)
ember_test_exe(test_plan_topology ${CMAKE_CURRENT_SOURCE_DIR}/dist/test_plan_topology.c)
foreach(np 1 2 3 4)
  ember_mpi_test(dist.plan_topology.np${np} ${np} test_plan_topology)
endforeach()
# `ember plan` with a topology, and `ember train`'s topology and predicted step lines.
ember_cli_test(cli.plan.topology 0 0 "^predicted step time [0-9.]+ ms" 1
               plan --world_size 4 --ranks_per_host 2 --intra_gbps 40 --inter_gbps 1)
# One rank per host: nothing stays inside a host, the inter-host bandwidth alone predicts.
ember_cli_test(cli.plan.topology_rank_per_host 0 0 "^predicted step time [0-9.]+ ms" 1
               plan --world_size 4 --ranks_per_host 1 --inter_gbps 1)
ember_cli_test(cli.plan.topology_twrw 0 0 "^t_cat_[01] table_row_wise ranks=(0,1|2,3)$" 2
               plan --world_size 4 --num_embeddings_per_feature 8000000,8000000 --pooling_factor 20
               --memory_per_rank 300000000 --ranks_per_host 2 --intra_gbps 40 --inter_gbps 1)
ember_cli_test(cli.plan.topology_sharding 0 0 "^t_cat_[0-9]+ table_row_wise ranks=(0,1|2,3)$" 26
               plan --world_size 4 --ranks_per_host 2 --intra_gbps 40 --inter_gbps 1 --sharding twrw)
ember_cli_test(cli.plan.bad_topology 0 1 "^ember plan: ember_plan_create: ranks_per_host 3 does not divide the world size 4" 1
               plan --world_size 4 --ranks_per_host 3)
ember_cli_test(cli.plan.two_hosts_no_bandwidth 0 1 "^ember plan: ember_plan_create: 2 hosts need intra_host_bw and inter_host_bw" 1
               plan --world_size 4 --ranks_per_host 2)
ember_cli_test(cli.plan.bad_gbps 0 2 "^ember plan: --inter_gbps 0: expected Gbit/s > 0$" 1 plan --inter_gbps 0)
ember_cli_test(dist.train.cli.predicted.np2 2 0 "^(  predicted   embedding step [0-9.]+ ms|step time: measured [0-9.]+ ms, predicted [0-9.]+ ms)" 2
               train --limit_train_batches 3 --limit_val_batches 1 --eval_interval 0)
