# gift_proto_library(TARGET PROTOS file.proto... [GRPC])
#
# Compiles .proto files (paths relative to proto/, so imports read
# "gift/v1/x.proto") into a C++ library. With GRPC, also generates the gRPC
# client and service classes. Generated code lands in the build tree, included as
# "gift/v1/x.pb.h".
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(GIFT_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

function(gift_proto_library target)
  cmake_parse_arguments(P "GRPC" "" "PROTOS" ${ARGN})
  set(out_dir ${PROJECT_BINARY_DIR}/proto)
  set(srcs)
  foreach(proto ${P_PROTOS})
    get_filename_component(dir ${proto} DIRECTORY)
    get_filename_component(name ${proto} NAME_WE)
    set(base ${out_dir}/${dir}/${name})
    set(outputs ${base}.pb.cc ${base}.pb.h)
    set(plugin_args)
    if(P_GRPC)
      list(APPEND outputs ${base}.grpc.pb.cc ${base}.grpc.pb.h)
      set(plugin_args --grpc_out=${out_dir} --plugin=protoc-gen-grpc=${GIFT_GRPC_CPP_PLUGIN})
    endif()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${out_dir}
      COMMAND protobuf::protoc --proto_path=${PROJECT_SOURCE_DIR}/proto --cpp_out=${out_dir}
              ${plugin_args} ${PROJECT_SOURCE_DIR}/proto/${proto}
      DEPENDS ${PROJECT_SOURCE_DIR}/proto/${proto}
      COMMENT "protoc ${proto}"
      VERBATIM)
    list(APPEND srcs ${outputs})
  endforeach()
  add_library(${target} ${srcs})
  target_include_directories(${target} PUBLIC ${out_dir})
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf)
  if(P_GRPC)
    target_link_libraries(${target} PUBLIC gRPC::grpc++)
  endif()
  # Generated code is not ours to warn about, and not fit for a unity build
  # (each .pb.cc defines the same file-local tables).
  target_compile_options(${target} PRIVATE -w)
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
endfunction()
