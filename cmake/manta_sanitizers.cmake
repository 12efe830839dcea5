# MANTA_SANITIZERS="address,undefined" instruments every target of this build.
if(MANTA_SANITIZERS)
  string(REPLACE "," ";" manta_sanitizer_list "${MANTA_SANITIZERS}")
  foreach(s IN LISTS manta_sanitizer_list)
    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${s}>)
    add_link_options(-fsanitize=${s})
  endforeach()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=undefined>)
endif()
