# Precompiled headers for the project's own code (the tests have theirs:
# tests/CMakeLists.txt). The third-party and standard headers that most
# sources include (cmake/third_party_pch.h: Abseil, gRPC, protobuf, Eigen,
# the standard library) are parsed once
# per build instead of once per source: twice in fact, since a precompiled
# header serves only code built with the same code model, once for the
# libraries (-fPIC, gift_pch_pic) and once for the executables (-fPIE,
# gift_pch_pie). Every other target reuses one of the two. The objects are
# what they were without it: the same flags, the same code (the headers only
# come first), plus -pthread on every source, which a reused header needs
# everywhere (_REENTRANT; glibc 2.36 reads it nowhere).
#
# The fuzz build (GIFT_FUZZ, clang) has them too: clang refuses a header
# built with other optimization or sanitizer flags, so the fuzz build's
# lightly built targets (tests/fuzz/CMakeLists.txt) set
# DISABLE_PRECOMPILE_HEADERS. Left out as well: targets with CUDA sources,
# targets that set their own (the tests), and sources marked
# SKIP_PRECOMPILE_HEADERS (the host emulation of CUDA, whose header must come
# first; sources with their own -m flags). GIFT_PCH=OFF turns all of it off,
# for a check that every source includes what it uses.
option(GIFT_PCH "Compile the project's sources with precompiled third-party headers" ON)

# gift_pch_hosts(): the two targets that build the headers.
function(gift_pch_hosts)
  set(anchor ${PROJECT_SOURCE_DIR}/cmake/third_party_pch.cc)
  add_library(gift_pch_pic OBJECT ${anchor})
  add_library(gift_pch_pie OBJECT ${anchor})
  set_target_properties(gift_pch_pie PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(gift_pch_pie PRIVATE -fPIE)
  foreach(host gift_pch_pic gift_pch_pie)
    target_compile_options(${host} PRIVATE -pthread)
    target_link_libraries(${host} PRIVATE Eigen3::Eigen gRPC::grpc++ protobuf::libprotobuf
      absl::status absl::statusor absl::strings absl::synchronization absl::flat_hash_map)
    target_precompile_headers(${host} PRIVATE ${PROJECT_SOURCE_DIR}/cmake/third_party_pch.h)
  endforeach()
endfunction()

# gift_targets_in(OUT DIR): every target defined in DIR and below it.
function(gift_targets_in out dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    gift_targets_in(sub_targets ${sub})
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# gift_precompile_project_headers(): gives every eligible target below the
# top directory one of the two headers. Call it last, when every target is
# defined.
function(gift_precompile_project_headers)
  if(NOT GIFT_PCH)
    return()
  endif()
  gift_pch_hosts()
  gift_targets_in(targets ${PROJECT_SOURCE_DIR})
  foreach(target ${targets})
    # The two hosts have their own header, and are skipped for it.
    get_target_property(type ${target} TYPE)
    if(NOT type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    get_target_property(own ${target} PRECOMPILE_HEADERS)
    get_target_property(reused ${target} PRECOMPILE_HEADERS_REUSE_FROM)
    get_target_property(disabled ${target} DISABLE_PRECOMPILE_HEADERS)
    if(own OR reused OR disabled)
      continue()
    endif()
    get_target_property(sources ${target} SOURCES)
    if(NOT sources MATCHES "\\.(cc|cpp)(;|$)" OR sources MATCHES "\\.cu(;|$)")
      continue()
    endif()
    get_target_property(pic ${target} POSITION_INDEPENDENT_CODE)
    if(type STREQUAL "EXECUTABLE")
      set(host gift_pch_pie)
    elseif(pic)
      set(host gift_pch_pic)
    else()
      continue()
    endif()
    target_compile_options(${target} PRIVATE -pthread)
    target_precompile_headers(${target} REUSE_FROM ${host})
  endforeach()
endfunction()
