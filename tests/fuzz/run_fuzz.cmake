# Runs one libFuzzer target for SECONDS over a copy of its seed corpus (see CMakeLists.txt):
#   cmake -DFUZZER=... -DSEEDS=<source corpus dir> -DWORK_DIR=<build dir> -DSECONDS=60
#         [-DDICT=amqp.dict] -P run_fuzz.cmake
# WORK_DIR/corpus gets the seeds again on every run and keeps what earlier runs found;
# a crashing input is written to WORK_DIR/artifacts/.
foreach(var FUZZER SEEDS WORK_DIR SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT IS_DIRECTORY "${SEEDS}")
  message(FATAL_ERROR "run_fuzz.cmake: no seed corpus at ${SEEDS}")
endif()

set(corpus "${WORK_DIR}/corpus")
set(artifacts "${WORK_DIR}/artifacts")
file(MAKE_DIRECTORY "${corpus}" "${artifacts}")
file(GLOB seeds "${SEEDS}/*")
file(COPY ${seeds} DESTINATION "${corpus}")

set(options -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
            -artifact_prefix=${artifacts}/)
if(DICT)
  list(APPEND options -dict=${DICT})
endif()
execute_process(COMMAND "${FUZZER}" ${options} "${corpus}" RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  file(GLOB found "${artifacts}/*")
  message(FATAL_ERROR "${FUZZER} failed (${status}). Input(s) that broke it: ${found}\n"
                      "Reproduce with: ${FUZZER} <input>; keep it as a named regression seed: "
                      "see tests/fuzz/README.md")
endif()
