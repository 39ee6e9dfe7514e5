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
