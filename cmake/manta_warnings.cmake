# Warnings for manta's own targets only (users of the installed package never see them).
function(manta_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang>>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
endfunction()
