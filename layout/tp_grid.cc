#include "layout/tp_grid.h"

#include <algorithm>
#include <cstdint>

namespace tessera::layout {

int SquareSide(int n) {
  int64_t q = 1;
  while ((q + 1) * (q + 1) <= n) ++q;
  return static_cast<int>(q);
}

int CubeSide(int n) {
  int64_t q = 1;
  while ((q + 1) * (q + 1) * (q + 1) <= n) ++q;
  return static_cast<int>(q);
}

TpGrid TpGridOf(TpMode mode, int tp, int depth) {
  TpGrid g{mode, tp, 1, 1};
  switch (mode) {
    case TpMode::k1D: break;
    case TpMode::k2D: g.q = SquareSide(tp); break;
    case TpMode::k2p5D:
      g.depth = std::max(1, depth);
      g.q = SquareSide(tp / g.depth);
      break;
    case TpMode::k3D: g.q = CubeSide(tp); break;
  }
  return g;
}

std::vector<int> TpGrid::Axes() const {
  switch (mode) {
    case TpMode::k1D: return {};
    case TpMode::k2D: return {q, q};
    case TpMode::k2p5D: return {depth, q, q};
    case TpMode::k3D: return {q, q, q};
  }
  return {};
}

bool TpGrid::Formed() const {
  if (mode == TpMode::k1D) return tp >= 1;
  int64_t product = 1;
  for (int n : Axes()) product *= n;
  return q >= 2 && product == tp;
}

int TpGrid::SampleSplit() const {
  switch (mode) {
    case TpMode::k1D: return 1;
    case TpMode::k2D: return q;
    case TpMode::k2p5D: return depth * q;
    case TpMode::k3D: return q * q;
  }
  return 1;
}

int TpGrid::HiddenSplit() const {
  return mode == TpMode::k1D ? 1 : mode == TpMode::k3D ? q * q : q;
}

int TpGrid::HeadSplit() const { return mode == TpMode::k1D ? tp : q; }

int TpGrid::WeightSplit() const {
  return mode == TpMode::k1D ? tp : mode == TpMode::k3D ? q * q * q : q * q;
}

int TpGrid::VocabSplit() const { return mode == TpMode::k1D ? tp : q; }

}  // namespace tessera::layout
