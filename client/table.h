// Plain-text tables for the CLI: columns padded to their widest cell, two spaces apart.
#ifndef TESSERA_CLIENT_TABLE_H_
#define TESSERA_CLIENT_TABLE_H_

#include <string>
#include <vector>

namespace tessera::client {

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // The table, one line per row, each ending in '\n'; the last column is not padded.
  std::string ToString() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_TABLE_H_
