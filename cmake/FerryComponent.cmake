# ferry_add_component(NAME SOURCES src... [PUBLIC lib...] [PRIVATE lib...] [PRIVATE_HEADERS name.hpp...])
#
# What every component library (common, allocator, transport, runtime)
# declares alike: the target ferry_NAME with the alias ferry::NAME, exported
# and built as such, its include/ public and its src/ private, Ferry's
# warnings, and both the library and its headers installed. Anything else a
# component needs (generated headers, optional sources) it adds to the
# target afterwards. PRIVATE_HEADERS are public headers that are not
# installed (the CUDA module's, which applications do not use).
function(ferry_add_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC;PRIVATE;PRIVATE_HEADERS" ${ARGN})
  set(target ferry_${name})
  add_library(${target} ${ARG_SOURCES})
  add_library(ferry::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/src)
    target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  endif()
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE} ferry_warnings)
  install(TARGETS ${target} EXPORT ferryTargets)
  set(excluded)
  foreach(header IN LISTS ARG_PRIVATE_HEADERS)
    list(APPEND excluded PATTERN ${header} EXCLUDE)
  endforeach()
  install(DIRECTORY include/ferry DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp" ${excluded})
endfunction()
