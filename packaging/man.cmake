# man.cmake - writes the man pages from the programs' option tables, the
# same tables that print --help (libtrace/options/options.h, print_man):
#   cmake -DSTRATA=... -DCONSUMERD=... -DOUT=DIR -P man.cmake
# OUT/man1/strata.1, OUT/man1/strata-COMMAND.1 for each command that
# `strata --help` lists, OUT/man8/strata-consumerd.8.  The old pages go
# first, so a command that is gone leaves no page behind.
file(REMOVE_RECURSE ${OUT}/man1 ${OUT}/man8)
file(MAKE_DIRECTORY ${OUT}/man1 ${OUT}/man8)
function(page file)
  execute_process(COMMAND ${ARGN} OUTPUT_FILE ${file} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "man page ${file}: '${ARGN}' exited ${rc}")
  endif()
endfunction()
page(${OUT}/man1/strata.1 ${STRATA} help --man)
execute_process(COMMAND ${STRATA} --help OUTPUT_VARIABLE top COMMAND_ERROR_IS_FATAL ANY)
string(REGEX MATCHALL "\n  [a-z-]+ " rows "${top}")
foreach(row ${rows})
  string(STRIP "${row}" cmd)
  page(${OUT}/man1/strata-${cmd}.1 ${STRATA} help --man ${cmd})
endforeach()
page(${OUT}/man8/strata-consumerd.8 ${CMAKE_COMMAND} -E env STRATA_HELP_FORMAT=man
     "STRATA_MAN_SUMMARY=the Strata trace daemon" ${CONSUMERD} --help)
