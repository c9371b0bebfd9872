#include "coordinator/free_device_index.h"

#include "absl/strings/str_cat.h"

namespace tessera::coordinator {

void FreeDeviceIndex::Set(const std::string& id, const Worker& worker) {
  auto it = workers_.find(id);
  if (it != workers_.end()) {
    const Worker& old = it->second;
    if (old == worker) return;
    if (old.alive) {
      Pool& p = pools_[old.key];
      p.by_free.erase({-old.free, id});
      p.free -= old.free;
      p.devices -= old.devices;
    }
  }
  workers_[id] = worker;
  if (!worker.alive) return;  // A lost worker's devices are nobody's.
  Pool& p = pools_[worker.key];
  if (worker.free > 0) p.by_free.insert({-worker.free, id});
  p.free += worker.free;
  p.devices += worker.devices;
}

int64_t FreeDeviceIndex::Free(const PoolKey& key) const {
  auto it = pools_.find(key);
  return it == pools_.end() ? 0 : it->second.free;
}

int64_t FreeDeviceIndex::Devices(const PoolKey& key) const {
  auto it = pools_.find(key);
  return it == pools_.end() ? 0 : it->second.devices;
}

const std::set<std::pair<int, std::string>>& FreeDeviceIndex::ByFree(const PoolKey& key) const {
  static const std::set<std::pair<int, std::string>> kNone;
  auto it = pools_.find(key);
  return it == pools_.end() ? kNone : it->second.by_free;
}

std::string FreeDeviceIndex::Difference(const FreeDeviceIndex& other) const {
  std::set<PoolKey> keys;
  for (const auto& [key, p] : pools_) keys.insert(key);
  for (const auto& [key, p] : other.pools_) keys.insert(key);
  for (const PoolKey& key : keys) {
    if (ByFree(key) != other.ByFree(key) || Free(key) != other.Free(key) || Devices(key) != other.Devices(key)) {
      return absl::StrCat("kind ", key.first, " pool ", key.second, ": ", Free(key), " free of ", Devices(key),
                          " on ", ByFree(key).size(), " workers; the other: ", other.Free(key), " of ",
                          other.Devices(key), " on ", other.ByFree(key).size());
    }
  }
  return "";
}

}  // namespace tessera::coordinator
