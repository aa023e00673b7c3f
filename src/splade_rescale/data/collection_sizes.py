"""Published sizes of the collections the paper evaluates on: documents, judged queries and mean
lengths, with their sources. The size guard and shard sizing fall back on them before a corpus
is local; the cost model (``costs.sizes``) reads them instead of counting a collection it lacks."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Size:
    """Document or query count and mean length in words."""

    count: int
    words: float


# Published collection sizes. MS MARCO passage: 8,841,823 passages, dev/small 6,980 queries, TREC DL
# 2019 / 2020 43 / 54 judged queries (ir-datasets.com); mean lengths from BEIR's MS MARCO row.
# BEIR: Thakur et al. 2021, "BEIR: A Heterogeneous Benchmark for Zero-shot Evaluation of Information
# Retrieval Models", Table 1 (#corpus, #test queries, average words per query / document); the counts
# agree with the bm25s benchmark table (xhluca/bm25s README). DL19/DL20 queries: the MS MARCO mean.
CORPUS_SIZES: dict[str, Size] = {  # ir_datasets docs store -> documents
    "msmarco-passage": Size(8_841_823, 55.98),
    "beir/trec-covid": Size(171_332, 160.77),
    "beir/nfcorpus": Size(3_633, 232.26),
    "beir/nq": Size(2_681_468, 78.88),
    "beir/hotpotqa": Size(5_233_329, 46.30),
    "beir/fiqa": Size(57_638, 132.32),
    "beir/arguana": Size(8_674, 166.80),
    "beir/webis-touche2020/v2": Size(382_545, 292.37),
    "beir/webis-touche2020": Size(382_545, 292.37),
    "beir/quora": Size(522_931, 11.44),
    "beir/dbpedia-entity": Size(4_635_922, 49.68),
    "beir/scidocs": Size(25_657, 176.19),
    "beir/fever": Size(5_416_568, 84.76),
    "beir/climate-fever": Size(5_416_593, 84.76),
    "beir/scifact": Size(5_183, 213.63),
}
QUERY_SIZES: dict[str, Size] = {  # ir_datasets id -> judged queries
    "msmarco-passage/dev/small": Size(6_980, 5.96),
    "msmarco-passage/trec-dl-2019/judged": Size(43, 5.96),
    "msmarco-passage/trec-dl-2020/judged": Size(54, 5.96),
    "beir/trec-covid": Size(50, 10.60),
    "beir/nfcorpus/test": Size(323, 3.30),
    "beir/nq": Size(3_452, 9.16),
    "beir/hotpotqa/test": Size(7_405, 17.61),
    "beir/fiqa/test": Size(648, 10.77),
    "beir/arguana": Size(1_406, 192.98),
    "beir/webis-touche2020/v2": Size(49, 6.55),
    "beir/webis-touche2020": Size(49, 6.55),
    "beir/quora/test": Size(10_000, 9.53),
    "beir/dbpedia-entity/test": Size(400, 5.39),
    "beir/scidocs": Size(1_000, 9.38),
    "beir/fever/test": Size(6_666, 8.13),
    "beir/climate-fever": Size(1_535, 20.13),
    "beir/scifact/test": Size(300, 12.37),
}
# Training data: MS MARCO passage triples (query and passage lengths as above).
MSMARCO_TRAIN = (Size(0, 5.96), Size(0, 55.98))
