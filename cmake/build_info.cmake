# Writes OUTPUT (build_info.cpp) from SOURCE_DIR/src/util/build_info.cpp.in with the checkout's git
# SHA, "-dirty" when tracked files differ from HEAD. Run at configure time and before every
# build (target fbt_build_info), so run records name the commit actually built; configure_file
# leaves OUTPUT untouched when the SHA is unchanged, so an unchanged SHA recompiles nothing.
execute_process(COMMAND git rev-parse --short=12 HEAD
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE FBT_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT FBT_GIT_SHA)
  set(FBT_GIT_SHA "unknown")
else()
  execute_process(COMMAND git diff --quiet HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                  RESULT_VARIABLE FBT_GIT_DIRTY ERROR_QUIET)
  if(FBT_GIT_DIRTY)
    set(FBT_GIT_SHA "${FBT_GIT_SHA}-dirty")
  endif()
endif()
configure_file(${SOURCE_DIR}/src/util/build_info.cpp.in ${OUTPUT} @ONLY)
