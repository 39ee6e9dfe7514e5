# Two "machines" in network namespaces over a shaped veth link: ferryd in one,
# the offload sample in the other (samples/two_hosts). Needs root and
# `ip netns`; without them the script exits 77 and ctest shows it as skipped.
if(TARGET ferryd AND TARGET two_hosts_offload)
  add_test(NAME two_hosts_netns
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/netns_test.sh $<TARGET_FILE:ferryd> $<TARGET_FILE:two_hosts_offload>)
  set_tests_properties(two_hosts_netns PROPERTIES LABELS "integration;netns" SKIP_RETURN_CODE 77 TIMEOUT 300
                       # Fixed namespace names: never two at once (two_hosts.sh also takes a lock).
                       RUN_SERIAL TRUE)
endif()

# A pool of three hosts behind differently shaped links (pool_hosts.sh): the
# scheduler spreads a tiled workload over all three and sends transfer-heavy
# tasks to the best link. Root and `ip netns`, or skipped (exit 77).
if(TARGET ferryd AND TARGET ferry_sleep_plugin)
  add_executable(pool_placement ${CMAKE_CURRENT_LIST_DIR}/pool_placement.cpp)
  target_link_libraries(pool_placement PRIVATE ferry::runtime)
  add_test(NAME pool_netns
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/pool_netns_test.sh $<TARGET_FILE:ferryd>
                   $<TARGET_FILE:pool_placement> $<TARGET_FILE:ferry_sleep_plugin>)
  set_tests_properties(pool_netns PROPERTIES LABELS "integration;netns" SKIP_RETURN_CODE 77 TIMEOUT 300
                       RUN_SERIAL TRUE)
endif()
