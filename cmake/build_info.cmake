# Writes OUT, the header `parity --version` reads (src/cli/version.cpp), run at every build
# (CMakeLists.txt, target parity_build_info): cmake -DSRC=... -DOUT=... -DVERSION=...
# -DCUDA=ON|OFF [-DCUDA_VERSION=...] [-DNCCL_VERSION=...] -P build_info.cmake.
# The commit: the environment's PARITY_COMMIT when set (a CI build of a tarball, or a
# checkout without .git), else `git rev-parse --short=12 HEAD` of SRC with "-dirty" when a
# tracked file differs from it, else "unknown" (SRC is not the top of a git work tree, or
# git is missing). file(CONFIGURE) leaves OUT untouched when its text is unchanged.
if(DEFINED ENV{PARITY_COMMIT} AND NOT "$ENV{PARITY_COMMIT}" STREQUAL "")
  set(commit "$ENV{PARITY_COMMIT}")
else()
  set(commit "unknown")
  find_program(GIT git)
  if(GIT)
    execute_process(COMMAND ${GIT} -C ${SRC} rev-parse --show-toplevel OUTPUT_VARIABLE top
                    RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    # Only parity's own repository: a source tree unpacked inside another repository is not.
    if(rc EQUAL 0 AND top)
      file(REAL_PATH "${top}" top)
      file(REAL_PATH "${SRC}" src_real)
    endif()
    if(rc EQUAL 0 AND top STREQUAL src_real)
      execute_process(COMMAND ${GIT} -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE head
                      RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(rc EQUAL 0 AND head)
        set(commit "${head}")
        execute_process(COMMAND ${GIT} -C ${SRC} status --porcelain --untracked-files=no
                        OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
        if(NOT rc EQUAL 0 OR NOT changes STREQUAL "")
          string(APPEND commit "-dirty")
        endif()
      endif()
    endif()
  endif()
endif()
# A C string literal: the commit may come from the environment, so quotes and backslashes are
# escaped and line breaks dropped.
string(REGEX REPLACE "[\r\n]" "" commit "${commit}")
string(REPLACE "\\" "\\\\" commit "${commit}")
string(REPLACE "\"" "\\\"" commit "${commit}")
if(CUDA)
  set(cuda 1)
else()
  set(cuda 0)
endif()
file(CONFIGURE OUTPUT "${OUT}" CONTENT "// Written by cmake/build_info.cmake at every build: do not edit.
#pragma once
#define PARITY_VERSION \"${VERSION}\"
#define PARITY_BUILD_COMMIT \"${commit}\"
#define PARITY_CUDA_BUILT ${cuda}
#define PARITY_CUDA_VERSION \"${CUDA_VERSION}\"
#define PARITY_NCCL_VERSION \"${NCCL_VERSION}\"
" @ONLY)
