# Included by scripts/llama_wheel.sh at the end of llama.cpp's project() call (CMAKE_PROJECT_llama.cpp_INCLUDE).
# llama-cpp-python forces LLAMA_BUILD_COMMON=ON, but its Python bindings load only libllama and libggml*:
# llama.cpp's common library (chat parsers, argument parsing, nlohmann/json, cpp-httplib) is never loaded.
# Switching it off here removes 57 of 140 compile steps (docs/llm.md, "The local model").
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library (unused by llama-cpp-python)" FORCE)
