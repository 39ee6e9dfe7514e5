// Being written; see transport/CMakeLists.txt.
