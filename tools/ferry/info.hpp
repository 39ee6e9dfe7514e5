#pragma once

namespace ferry::tools {

// Prints the machine's memory/compute picture as aligned text, or as JSON
// with the same content. Returns the process exit status.
int run_info(bool as_json);

}  // namespace ferry::tools
