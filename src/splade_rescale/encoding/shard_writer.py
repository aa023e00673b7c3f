"""The shard writer: encoded chunks in corpus order -> JsonVectorCollection shards, on a thread of its own.

A shard is final once written: its file is renamed into place and its record written beside the work
folder (:class:`~splade_rescale.encoding.shard_folder.ShardFolder`). Shard, frequencies and record are
synced to disk in that order, so a record survives a node crash only with its shard.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import threading

import numpy as np

from splade_rescale.atomic import atomic_file, fsync_path, write_json
from splade_rescale.encoding.shard_folder import ShardFolder, ShardRecord
from splade_rescale.encoding.vector_lines import Batches, TermStats, VectorLines, doc_prefix, gzip_compressor

log = logging.getLogger(__name__)


class ShardWriter:
    """Writes chunks of encoded documents, shard by shard, in a background thread.

    Chunks arrive in corpus order and never straddle a shard (the caller cuts them at shard
    boundaries), so shard ``k`` holds documents ``[k * shard_docs, (k + 1) * shard_docs)``.
    ``put`` returns at once (up to ``depth`` chunks wait); errors surface on the next call.
    """

    def __init__(self, folder: ShardFolder, shard_docs: int, first_doc: int, depth: int = 2) -> None:
        self.folder, self.shard_docs = folder, shard_docs
        self._finished = TermStats()  # this run's finished shards
        self.error: BaseException | None = None
        self._pos = first_doc
        self._lines = VectorLines()
        self._shard: _OpenShard | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread = threading.Thread(target=self._run, name="shard-writer", daemon=True)
        self._thread.start()

    def put(self, docids: list[str], batches: Batches) -> None:
        """Queue a chunk (its ids in corpus order, its rows as encoded: ``(positions, rows)`` per batch)."""
        self._raise()
        self._queue.put((docids, batches))

    def close(self) -> None:
        """Finish the last shard and stop the thread."""
        self._queue.put(None)
        self._thread.join()
        self._raise()
        if self._shard is not None:
            self._finish_shard()

    def abort(self, write_queued: bool = True) -> None:
        """Stop without finishing the open shard (its partial file is removed).

        ``write_queued``: the chunks already encoded and queued are written first, so a shard
        they complete is kept for the rerun (the caller failed after them, not in them).
        """
        if not write_queued:
            self._drop_queued()
        self._queue.put(None)
        self._thread.join(timeout=600)
        if self._shard is not None:
            self._shard.discard()

    def _drop_queued(self) -> None:
        """Empty the queue unwritten (which also unblocks a producer waiting on it)."""
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                return

    @property
    def stats(self) -> TermStats:
        """Documents written by this run so far (finished shards + the open one)."""
        out = TermStats().merge(self._finished)
        return out.merge(self._shard.stats) if self._shard is not None else out

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            try:
                if self.error is None:
                    self._write(*item)
            except BaseException as exc:  # surfaced in the caller's thread
                self.error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _write(self, docids: list[str], batches: Batches) -> None:
        data = self._lines.ordered([doc_prefix(d) for d in docids], batches)
        if self._shard is None:
            self._shard = _OpenShard(self.folder, self._pos // self.shard_docs, docids[0])
        self._shard.write(data, docids[-1], batches)
        self._pos += len(docids)
        if self._pos % self.shard_docs == 0:
            self._finish_shard()

    def _finish_shard(self) -> None:
        assert self._shard is not None
        self._shard.finish()
        self._finished.merge(self._shard.stats)
        self._shard = None


class _OpenShard:
    def __init__(self, folder: ShardFolder, k: int, first_id: str) -> None:
        self.folder, self.k, self.first_id, self.last_id = folder, k, first_id, first_id
        self.path = folder.shard(k)
        self.tmp = self.path.with_name(self.path.name + ".partial")
        self.fh = open(self.tmp, "wb")
        self.gz = gzip_compressor()
        self.sha = hashlib.sha256()
        self.size = 0
        self.stats = TermStats()

    def _emit(self, data: bytes) -> None:
        self.fh.write(data)
        self.sha.update(data)
        self.size += len(data)

    def write(self, data: bytes, last_id: str, batches: Batches) -> None:
        self._emit(self.gz.compress(data))
        self.last_id = last_id
        for _, rows in batches:
            self.stats.add(rows)

    def finish(self) -> None:
        """Shard, then df file, then record, each durable before the next (the record means 'final')."""
        self._emit(self.gz.flush())
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()
        with atomic_file(self.folder.df_path(self.k), fsync=True) as tmp, open(tmp, "wb") as f:
            np.save(f, self.stats.df)
        os.replace(self.tmp, self.path)
        fsync_path(self.path.parent)
        record = ShardRecord(self.k, self.stats.n, self.first_id, self.last_id, self.size, self.sha.hexdigest(),
                             self.stats.nnz, self.stats.n_empty)
        write_json(self.folder.record(self.k), record.__dict__, fsync=True)
        log.info("shard %s finished: %d documents", self.path.name, self.stats.n)

    def discard(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)
