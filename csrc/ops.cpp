// Every fastgnn op schema, in one place. Implementations register per device in
// csrc/cpu/<family>.cpp and csrc/cuda/<family>.cpp; fake kernels are registered from Python
// (fastgnn/ops/<family>.py), and so is autograd, except SpMM's (csrc/spmm_autograd.cpp: its
// calls are host-bound at small widths).
//
// Conventions: a graph arrives as destination-major CSR (rowptr [T+1], col [E], both int32 or
// both int64); rows are destinations, col holds sources. Optional per-edge values are float32
// in CSR order. Launch choices picked by the tuner arrive as plain ints.
#include <torch/library.h>

#include "graph_cache.h"

TORCH_LIBRARY(fastgnn, m) {
  // ---- SpMM family -------------------------------------------------------------------------
  // out = A x with A[i, col[e]] = value[e] for e in row i (value 1 when absent), or, with
  // transpose=true, out = A^T x. The optional t_* tensors are the cached transpose of the same
  // structure (t_perm maps a transposed edge to its CSR position); without them a transposed
  // product uses the device's fallback. t_value optionally holds value already in transposed
  // order (value[t_perm], cached per graph by the caller) to spare the per-edge indirection. num_out is the number of output rows. graph_key names
  // the owning fastgnn.Graph for per-graph device caches (0: none); algo is the tuner's pick.
  // algo: bits 0-7 pick this call's kernel (0-6 ours, 16-17 cuSPARSE; see
  // fastgnn/ops/spmm.py ALGOS), bits 8-15 carry the backward's pick for the autograd formula.
  m.def("spmm(Tensor rowptr, Tensor col, Tensor? value, Tensor x, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? t_perm, Tensor? t_value, int num_out, bool transpose, int graph_key, "
        "int algo) "
        "-> Tensor");
  // out[e] = <a[row(e)], b[col(e)]> in float32: the edge-weight gradient of spmm, without an
  // E x D intermediate.
  m.def("sddmm(Tensor rowptr, Tensor col, Tensor a, Tensor b) -> Tensor");

  // ---- per-graph native caches (catch-all kernels, no tensors) ---------------------------------
  // Number of live cache entries over all graphs (for tests and diagnostics).
  m.def("graph_cache_size() -> int", &fastgnn::graph_cache_size);

  // ---- Min/max aggregation -------------------------------------------------------------------
  // out[i, f] = min (is_max: max) of x[j, f] over the sources j of row i, with arg[i, f] the
  // winning source: ties go to the row's earliest edge (the graph's CSR holds sources ascending
  // within each row: the smallest source, then the earliest duplicate), with last_wins to its
  // latest (DGL's rules run on a CSR whose rows hold their edges in edge-id order). NaN wins
  // (the first NaN; last_wins: the last), rows without edges get out 0 and arg -1. arg has
  // col's dtype. With weight ([E, H] in input edge order, x's dtype, H dividing F = x.size(1);
  // edge_perm maps CSR position p to its input edge, None: the same order) the message of
  // position p is x[col[p], f] * weight[edge_perm[p], f / (F / H)] (rounded to x's dtype) and
  // arg[i, f] holds the winning CSR position instead of the source.
  // GPU only: light_rows/heavy_rows split the rows by degree (both absent: every row
  // takes the light path), max_degree bounds the heavy rows' degree, config packs the tuner's
  // launch choice (warps per block in bits 0-7, edges per heavy block in bits 8-31; 0:
  // defaults; bits 32-47: the edges per work item of the load-balanced path, which then does
  // every row, its work list cached per graph_key, 0: built for the call). last_wins takes the
  // light path only (no heavy_rows, no load-balanced config), as does ignore_nan (DGL's rule:
  // each entry starts from the identity, -inf for max or +inf for min, with no winner, arg -1,
  // and an ordered comparison takes a message, so NaN never wins; with last_wins an equal
  // message wins too).
  // t_rowptr/t_col (the transposed CSR) are not read here: they are passed through so that
  // autograd keeps them for a deterministic GPU backward.
  m.def("minmax_aggregate(Tensor rowptr, Tensor col, Tensor x, bool is_max, Tensor? light_rows, "
        "Tensor? heavy_rows, int max_degree, int config, Tensor? t_rowptr, Tensor? t_col, "
        "int graph_key=0, Tensor? weight=None, Tensor? edge_perm=None, "
        "bool last_wins=False, bool ignore_nan=False) -> (Tensor, Tensor)");
  // grad_x[arg[i, f], f] += grad_out[i, f] (arg -1: nothing), grad_x with num_src rows. With
  // col, weight and edge_perm (the forward's), arg holds CSR positions p: grad_x[col[p], f] +=
  // grad_out[i, f] * weight[edge_perm[p], f / (F / H)]. With the transposed CSR the GPU pulls
  // per source (deterministic); without it, it uses atomics.
  m.def("minmax_aggregate_backward(Tensor arg, Tensor grad_out, int num_src, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? col=None, Tensor? weight=None, Tensor? edge_perm=None) -> Tensor");
  // The weighted forward's weight gradient, [E, heads] in input edge order: grad_w[edge_perm[p],
  // h] = sum of grad_out[i, f] * x[col[p], f] over the features f of head h that position p won
  // (arg[i, f] == p). Deterministic on every device (rows own their edges: no atomics).
  m.def("minmax_weight_backward(Tensor rowptr, Tensor col, Tensor arg, Tensor grad_out, "
        "Tensor x, int heads, Tensor? edge_perm=None) -> Tensor");

  // ---- Edge softmax ------------------------------------------------------------------------
  // Softmax of logits [E, W] (input edge order) over the edges of each row, per column w: the
  // edges of row i are the positions [rowptr[i], rowptr[i + 1]) (a destination's in-edges in
  // the CSR, or a source's out-edges in the transposed CSR), position p holding input edge
  // edge_perm[p] (None: p); rowptr's last entry must be E. out[e, w] = exp(logits[e, w] - m) /
  // sum over the row of exp(logits[., w] - m), m the row's maximum, accumulated in float32
  // (float64 for float64). A row whose maximum is +-inf (all -inf included) or that holds a NaN
  // gives NaN, as DGL's edge_softmax does.
  // GPU only: light_rows/heavy_rows (both or neither; the CPU ignores them) split the rows by
  // length, the light ones a warp each and the heavy ones a block each; None: every row a warp.
  m.def("edge_softmax(Tensor rowptr, Tensor? edge_perm, Tensor logits, Tensor? light_rows, "
        "Tensor? heavy_rows) -> Tensor");
  // grad_logits = out * (grad_out - sum over the row of out * grad_out), from the forward's
  // output (not its logits), over the same rows.
  m.def("edge_softmax_backward(Tensor rowptr, Tensor? edge_perm, Tensor out, Tensor grad_out, "
        "Tensor? light_rows, Tensor? heavy_rows) -> Tensor");

  // ---- Attention family --------------------------------------------------------------------
  // Fused GATv2 and dot-product attention over destination-major CSR; features are [N, H, D].
  // Forward returns out [T, H, D] and lse [T, H] (log-sum-exp of each destination's logits;
  // -inf without in-edges), float32 (float64 for float64 inputs): the only saved statistic.
  // edge_term [E, H, D] is in input edge order; edge_perm (CSR position -> input position,
  // None: identity) locates it. Attention dropout (dropout > 0) keeps edge e (CSR position),
  // head h when the counter hash of (seed, offset, e, h) passes (csrc/attention_dropout.h),
  // so the backward regenerates the mask. seed_tensor (a one-element int64 tensor on the
  // features' device), when given, replaces seed: the kernels read it when they run, so a
  // CUDA graph replay or a compiled graph can draw a fresh seed on the device each time
  // (fastgnn/ops/attention.py does while a CUDA graph is captured or torch.compile traces).
  // light_rows/heavy_rows split destinations by degree (None: one launch over every row);
  // heavy rows get heavy_warps warps each (CUDA only).
  // The forward ignores t_rowptr/t_col/t_perm: it takes them so that autograd can hand them
  // to the backward (see below).
  m.def("gatv2_forward(Tensor rowptr, Tensor col, Tensor? edge_perm, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? t_perm, Tensor x_dst, "
        "Tensor x_src, Tensor att, Tensor? edge_term, float negative_slope, float dropout, "
        "int seed, Tensor? seed_tensor, int offset, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) -> (Tensor out, Tensor lse)");
  // Gradients of gatv2_forward. Source-side gradients walk the transposed CSR (t_rowptr,
  // t_col, t_perm: transposed edge -> CSR position); with t_rowptr and t_col None the graph is
  // symmetric, the CSR is its own transpose and one fused pass computes every gradient.
  // grad_edge_term is empty when edge_term is None.
  m.def("gatv2_backward(Tensor grad_out, Tensor out, Tensor lse, Tensor rowptr, Tensor col, "
        "Tensor? edge_perm, Tensor? t_rowptr, Tensor? t_col, Tensor t_perm, Tensor x_dst, "
        "Tensor x_src, Tensor att, Tensor? edge_term, float negative_slope, float dropout, "
        "int seed, Tensor? seed_tensor, int offset, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) "
        "-> (Tensor grad_x_dst, Tensor grad_x_src, Tensor grad_att, Tensor grad_edge_term)");
  // Dot-product attention: logit = scale * <q[i], k[j] (+ edge_term[e])>, values v[j]
  // (+ edge_term[e]). Same conventions as gatv2_forward/backward.
  m.def("graph_attention_forward(Tensor rowptr, Tensor col, Tensor? edge_perm, "
        "Tensor? t_rowptr, Tensor? t_col, Tensor? t_perm, Tensor q, "
        "Tensor k, Tensor v, Tensor? edge_term, float scale, float dropout, int seed, "
        "Tensor? seed_tensor, int offset, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) -> (Tensor out, Tensor lse)");
  m.def("graph_attention_backward(Tensor grad_out, Tensor out, Tensor lse, Tensor rowptr, "
        "Tensor col, Tensor? edge_perm, Tensor? t_rowptr, Tensor? t_col, Tensor t_perm, "
        "Tensor q, Tensor k, Tensor v, Tensor? edge_term, float scale, float dropout, int seed, "
        "Tensor? seed_tensor, int offset, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) "
        "-> (Tensor grad_q, Tensor grad_k, Tensor grad_v, Tensor grad_edge_term)");
  // GAT (v1): logit = LeakyReLU(alpha_src[j] + alpha_dst[i] (+ alpha_edge[e])) from per-node
  // scores alpha_dst [T, H], alpha_src [S, H] (alpha_edge [E, H], input edge order); values
  // x_src [S, H, D]. Same conventions as gatv2_forward/backward.
  m.def("gat_forward(Tensor rowptr, Tensor col, Tensor? edge_perm, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? t_perm, Tensor alpha_dst, Tensor x_src, Tensor alpha_src, "
        "Tensor? alpha_edge, float negative_slope, float dropout, int seed, "
        "Tensor? seed_tensor, int offset, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) -> (Tensor out, Tensor lse)");
  m.def("gat_backward(Tensor grad_out, Tensor out, Tensor lse, Tensor rowptr, Tensor col, "
        "Tensor? edge_perm, Tensor? t_rowptr, Tensor? t_col, Tensor t_perm, Tensor alpha_dst, "
        "Tensor x_src, Tensor alpha_src, Tensor? alpha_edge, float negative_slope, "
        "float dropout, int seed, Tensor? seed_tensor, int offset, Tensor? light_rows, "
        "Tensor? heavy_rows, int heavy_warps) -> (Tensor grad_alpha_dst, Tensor grad_x_src, "
        "Tensor grad_alpha_src, Tensor grad_alpha_edge)");
  // gat_backward in two steps, for callers that bound memory (fastgnn/_gat_layer.py). The
  // source step walks rows [row_begin, row_begin + x_rows.size(0)) of the transposed CSR
  // (rowptr, col, src_perm; on a symmetric graph the CSR and t_perm), x_rows and
  // alpha_src_rows being those sources' features; it reads no other source row, writes each
  // walked edge's logit gradient into grad_logit ([E, H], statistics dtype, CSR order) and
  // returns the rows' gradients. delta [T, H] = <grad_out, out> per destination and head.
  // light_rows/heavy_rows are row buckets relative to row_begin (CUDA only). With logit_slot
  // ([E], index dtype, by walked position) each walked edge's logit gradient goes to row
  // logit_slot[q] of grad_logit ([n, H]) instead, so that a range of sources can fill a buffer
  // of its own edges (on CUDA the slots are trusted, as src_perm is). The destination
  // step sums grad_logit over each CSR row into grad_alpha_dst ([T, H], dtype) and, with
  // with_edge, copies it to grad_alpha_edge in input edge order. attention_delta_backward
  // gives delta from grad_out and out ([T, H, D] each).
  m.def("attention_delta_backward(Tensor grad_out, Tensor out) -> Tensor");
  m.def("gat_source_backward(Tensor grad_out, Tensor lse, Tensor delta, Tensor rowptr, "
        "Tensor col, Tensor src_perm, Tensor? edge_perm, Tensor alpha_dst, Tensor x_rows, "
        "Tensor alpha_src_rows, Tensor? alpha_edge, float negative_slope, float dropout, "
        "int seed, Tensor? seed_tensor, int offset, int row_begin, Tensor? light_rows, "
        "Tensor? heavy_rows, int heavy_warps, Tensor(a!) grad_logit, Tensor? logit_slot=None) "
        "-> (Tensor grad_x_rows, Tensor grad_alpha_src_rows)");
  m.def("gat_destination_backward(Tensor rowptr, Tensor grad_logit, Tensor? edge_perm, "
        "bool with_edge, ScalarType dtype, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) -> (Tensor grad_alpha_dst, Tensor grad_alpha_edge)");
  // The [E, H] keep-mask (CSR order, bool) that the kernels apply for this seed and offset:
  // lets tests evaluate the reference with the exact same dropout.
  m.def("attention_dropout_mask(Tensor col, int heads, float dropout, int seed, int offset) "
        "-> Tensor");

  // ---- Reordering ----------------------------------------------------------------------------
  // Reverse Cuthill-McKee order of an undirected graph given as its symmetric CSR: perm (int64)
  // with perm[new_id] = old_id. CPU only (a sequential search, run once per dataset).
  m.def("reorder_rcm(Tensor rowptr, Tensor col) -> Tensor");

  // ---- WSB (weighted block-sparse) Tensor Core format ---------------------------------------
  // out = A x over the WSB layout (fastgnn/ops/wsb.py builds it from the CSR): destinations in
  // windows of 16 rows; window w owns tiles [tile_ptr[w], tile_ptr[w+1]); tile t covers the 16
  // source columns tile_cols[16t..16t+15] (int32, -1: padding) with the dense 16 x 16 row-major
  // value block tile_vals[256t..] (x's dtype). CUDA: float16/bfloat16 Tensor Core products with
  // float accumulation; CPU: scalar loops (any float dtype), for tests. work and splits are the
  // layout's plan (WSB.plan(): which warps walk which tiles, csrc/cuda/wsb_kernels.h), read by
  // the CUDA kernel only. The rest are not read: they are the CSR route of the gradient (the
  // spmm op's arguments, algo's backward bits), so that autograd hands them to the backward, as
  // the attention ops do.
  m.def("wsb_spmm(Tensor tile_ptr, Tensor tile_cols, Tensor tile_vals, Tensor x, int num_out, "
        "Tensor work, Tensor splits, "
        "Tensor rowptr, Tensor col, Tensor? value, Tensor? t_rowptr, Tensor? t_col, "
        "Tensor? t_perm, Tensor? t_value, int graph_key, int algo) -> Tensor");
  // Dot-product (Graph Transformer) attention over the same layout: graph_attention_forward's
  // (out, lse) without edge_term or dropout, tile_counts (q's dtype) holding the number of
  // edges of each slot (a slot of c duplicate edges weighs c exp(logit)). CUDA: float16/
  // bfloat16, head dims 32, 64 and 128, 16-byte aligned q, k, v, on Tensor Cores with float
  // accumulation; CPU: scalar loops (any float dtype), for tests. work and splits are the
  // layout's attention plan (WSB.attention_plan(), csrc/cuda/wsb_kernels.h), read by the CUDA
  // kernel only. The rest are not read: edge_starts (None: the backward runs on CSR) and
  // graph_attention_backward's CSR route and launch plan, so that autograd hands them to the
  // backward.
  m.def("wsb_graph_attention_forward(Tensor tile_ptr, Tensor tile_cols, Tensor tile_counts, "
        "Tensor work, Tensor splits, Tensor? edge_starts, Tensor q, Tensor k, Tensor v, "
        "float scale, Tensor rowptr, Tensor col, Tensor? edge_perm, Tensor? t_rowptr, "
        "Tensor? t_col, Tensor? t_perm, Tensor? light_rows, Tensor? heavy_rows, "
        "int heavy_warps) -> (Tensor out, Tensor lse)");
  // Its gradients: graph_attention_backward's (without edge_term or dropout) with the
  // destination pass on the layout (q's gradient and each edge's dLogit and softmax weight;
  // CUDA: on Tensor Cores with float accumulation, CPU: scalar loops, for tests), then the CSR
  // source pass over the transpose (t_rowptr, t_col, t_perm; on a symmetric graph t_perm only,
  // the CSR and its light_rows/heavy_rows buckets) for k's and v's. edge_starts [pieces * 16]
  // (int32): per piece of `work` and row of its window, the CSR position of the row's first
  // edge in the piece (WSB.attention_edge_starts()); tile_ptr is checked, not read.
  m.def("wsb_graph_attention_backward(Tensor grad_out, Tensor out, Tensor lse, "
        "Tensor tile_ptr, Tensor tile_cols, Tensor tile_counts, Tensor work, Tensor splits, "
        "Tensor edge_starts, Tensor rowptr, Tensor col, Tensor? t_rowptr, Tensor? t_col, "
        "Tensor t_perm, Tensor q, Tensor k, Tensor v, float scale, Tensor? light_rows, "
        "Tensor? heavy_rows, int heavy_warps) -> (Tensor grad_q, Tensor grad_k, Tensor grad_v)");
  // ---- MaxK family ---------------------------------------------------------------------------
  // CBSR (compressed balanced sparse rows) holds the k kept entries of each row of an [N, F]
  // matrix: values [N, k] (x's dtype) and column indices [N, k] in ascending column order,
  // dtype uint8 for F <= 256, int16 for F <= 32768, else int32 (csrc/maxk_common.h).
  // maxk: the k largest entries of each row of x; ties go to the smallest column, NaN counts
  // as the largest value, -0.0 equals +0.0.
  m.def("maxk(Tensor x, int k) -> (Tensor values, Tensor indices)");
  // out [num_dst, num_features] = A h, h the CBSR matrix of num_src rows, A[i, col[e]] =
  // value[e] (1 when absent; float32, float64 for float64 values, CSR order). The forward
  // ignores t_rowptr/t_col/t_perm/t_value (the cached transpose, t_value the edge values in
  // its order): autograd keeps them for the backward. config: bits 0-19 the edges per work
  // item (CUDA; 0: default), bits 32-63 the backward's maxk_sspmm config (read by the op's
  // autograd, csrc/maxk_autograd.cpp).
  m.def("maxk_spgemm(Tensor rowptr, Tensor col, Tensor? value, Tensor values, Tensor indices, "
        "int num_features, Tensor? t_rowptr, Tensor? t_col, Tensor? t_perm, Tensor? t_value, "
        "int graph_key, int config) -> Tensor");
  // grad_values [num_src, k] = (A^T grad_out) sampled at the CBSR pattern `indices`: only the
  // k kept entries of each source row. Pulled over the transposed CSR (t_rowptr, t_col,
  // t_value in transposed order; deterministic), or with config bit 0 pushed over the
  // forward CSR (rowptr, col, value) from each dense grad_out row (the paper's outer-product
  // SSpMM): on CUDA from shared memory with atomic adds, on the CPU into per-thread
  // [num_src, k] buffers summed in thread order. config bits 8-27: edges per work item (CUDA).
  m.def("maxk_sspmm(Tensor rowptr, Tensor col, Tensor? value, Tensor? t_rowptr, Tensor? t_col, "
        "Tensor? t_value, Tensor grad_out, Tensor indices, int graph_key, int config) -> Tensor");
  // ---- Snapshot SpMM family (a window of T graph snapshots on one node set) --------------------
  // out[t, i] = dst_scale[t, i] * sum over edges e of row i present in snapshot t of
  // src_scale[t, col[e]] * x[t, col[e]]; x is [T, num_src, F], out [T, num_out, F], scales
  // [T, num_src] and [T, num_out] in the accumulation dtype (absent: 1). In each row the edges
  // [rowptr[i], shared_end[i]) are in every snapshot (their mask is not read); the rest are in
  // the snapshots whose bit is set in mask[e] (int64, bit t: snapshot t). Each shared edge is
  // read once for all T snapshots. The t_* tensors are the same structure transposed (rows
  // are sources; None when no gradient is wanted): the forward ignores them, autograd runs
  // the backward, the same op, on them. graph_key names the SnapshotGraph for per-structure GPU
  // caches (0: none) and transposed says which of its two structures is walked: on the GPU
  // rows are cut into items of at most 64 edges (the SpMM family's cached work list), and the
  // items of a row of several add into it with atomics.
  m.def("spmm_snapshots(Tensor rowptr, Tensor shared_end, Tensor col, Tensor mask, Tensor x, "
        "Tensor? src_scale, Tensor? dst_scale, int num_out, Tensor? t_rowptr, "
        "Tensor? t_shared_end, Tensor? t_col, Tensor? t_mask, int graph_key=0, "
        "bool transposed=False) -> Tensor");
  // ---- Neighbour sampling --------------------------------------------------------------------
  // Every layer of a mini-batch's neighbour sampling over a destination-major CSR (rows: the
  // nodes whose neighbours are drawn), in one call. seeds [S] (int64, unique) start the known
  // nodes; layer l samples fanouts[l] of each row's edges (-1: all; with or without
  // replacement; weight-proportional when weight, float32 in CSR order, is given: zero weights
  // are never drawn) for every known node (expand_all: DGL's blocks) or for the nodes layer
  // l - 1 added (PyG's hops), with draws that depend only on (layer_seeds[l], seed position,
  // draw), never on threads. Layer l returns destination-major CSR over its seeds, rowptrs[l]
  // and cols[l] (local ids, ascending within a row; int32 unless its bound on known + sampled
  // nodes passes int32, csrc/sampling_plan.h), edge_ids[l] (the sampled edges' CSR positions
  // mapped through edge_map, the user's edge ids, when given). nodes: the seeds, then each
  // layer's new sources in the order of their first sampled edge; layer l's nodes are its
  // prefix of length known(l + 1), known(l) being the rows of layers up to l (one list
  // rather than one per layer: an op's outputs must not alias each other).
  // deterministic=false lets the GPU number new nodes in the order it meets them (faster);
  // the CPU kernel always is deterministic.
  m.def("sample_neighbors(Tensor rowptr, Tensor col, Tensor? weight, Tensor? edge_map, "
        "Tensor seeds, int[] fanouts, int[] layer_seeds, bool expand_all, bool replace, "
        "bool deterministic) -> (Tensor[] rowptrs, Tensor[] cols, Tensor[] edge_ids, "
        "Tensor nodes)");
  // sample_neighbors for several batches in one call (on the GPU: each pass launched once for
  // all of them, one read-back). seeds packs the batches' seeds (batch b: the next
  // batch_sizes[b]); layer_seeds holds batch b's layer l at b * len(fanouts) + l. Each batch
  // gets what sample_neighbors gives it alone, except that a layer's local ids are int64 in
  // every batch when they are in the largest batch. The outputs are packed: per layer one
  // rowptrs, cols and edge_ids tensor, and one nodes tensor, batch b's parts at the offsets of
  // layout[b] (an int64 CPU tensor with a row per batch: per layer its row pointers' offset and
  // row count (rows + 1 pointers), its edges' offset and count; then its node list's offset and
  // length). The GPU leaves gaps between the parts (each sized from the batch's bounds).
  m.def("sample_neighbors_many(Tensor rowptr, Tensor col, Tensor? weight, Tensor? edge_map, "
        "Tensor seeds, int[] batch_sizes, int[] fanouts, int[] layer_seeds, bool expand_all, "
        "bool replace, bool deterministic) -> (Tensor[] rowptrs, Tensor[] cols, "
        "Tensor[] edge_ids, Tensor nodes, Tensor layout)");
}
