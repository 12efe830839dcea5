# MANTA_SANITIZERS="address,undefined" instruments every target of this build.
if(MANTA_SANITIZERS)
  string(REPLACE "," ";" manta_sanitizer_list "${MANTA_SANITIZERS}")
  foreach(s IN LISTS manta_sanitizer_list)
    add_compile_options(-fsanitize=${s})
    add_link_options(-fsanitize=${s})
  endforeach()
  add_compile_options(-fno-omit-frame-pointer -fno-sanitize-recover=undefined)
endif()
