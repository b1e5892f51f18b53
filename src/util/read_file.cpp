#include "fbt/util/read_file.h"

#include <fstream>
#include <sstream>

#include "fbt/util/error.h"

namespace fbt {

std::string read_whole_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + what + " '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) throw Error("read error on " + what + " '" + path + "'");
  return buf.str();
}

}  // namespace fbt
