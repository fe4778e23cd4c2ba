# control.cmake - the control plane's part of libtrace, included by
# libtrace/CMakeLists.txt once the `strata` target exists.
#
#  - into libstrata (PRIVATE, hidden): the process-side state query client
#    (strata_ctl_sync_query, strata_ctl_async_init, strata_ctl_fork_child:
#    the only symbols it exports) and the protocol;
#  - strata_control (STATIC, PIC): the protocol plus the controller client,
#    for strata-consumerd, the `strata` command and the tests.
set(_strata_ctl_dir ${CMAKE_CURRENT_LIST_DIR})
# libtrace/ itself (this file is include()d from there): proto/ and the
# headers its products share, named from the top, not by "..".
set(_strata_lt_dir ${CMAKE_CURRENT_SOURCE_DIR})
set(_strata_proto_sources
    ${_strata_lt_dir}/proto/proto.cpp
    ${_strata_lt_dir}/proto/proc_codec.cpp
    ${_strata_lt_dir}/proto/sock.cpp)

foreach(_rt strata strata_hooked)
  if(TARGET ${_rt})
    # The state query by role (sync_shared.h): the query, the exchange and
    # joins, the lazy hand-off, probe marks, aggregation, the module's answer.
    target_sources(${_rt} PRIVATE ${_strata_ctl_dir}/sync_query.cpp ${_strata_ctl_dir}/sync_join.cpp
        ${_strata_ctl_dir}/sync_lazy.cpp ${_strata_ctl_dir}/sync_marks.cpp ${_strata_ctl_dir}/sync_agg.cpp
        ${_strata_ctl_dir}/sync_kmod.cpp ${_strata_ctl_dir}/kmod_link.cpp ${_strata_proto_sources})
    target_include_directories(${_rt} PRIVATE ${_strata_lt_dir})
  endif()
endforeach()

add_library(strata_control STATIC ${_strata_proto_sources} ${_strata_ctl_dir}/ctl_client.cpp
    ${_strata_ctl_dir}/names.cpp ${_strata_lt_dir}/proto/serial_frame.cpp)
add_library(Strata::control ALIAS strata_control)
set_target_properties(strata_control PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(strata_control PUBLIC ${_strata_lt_dir} ${_strata_lt_dir}/runtime ${STRATA_INCLUDE_DIR})
