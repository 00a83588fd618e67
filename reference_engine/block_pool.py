"""The KV block pool: a fixed set of blocks, reference counts, and the prefix cache.

A block holds `block_size` tokens of KV. A *full*, computed block is registered in the
prefix cache under hash(parent block's hash, its tokens), so a block's identity covers the
whole prefix before it. A lookup walks a prompt's full blocks from the start and stops at
the first miss; the stored tokens and parent hash are compared on every hit, so a hash
collision can never serve the wrong KV. The last prompt token is always computed (a prompt
is never entirely served from cache: the model must produce the logits for the next token).

Freed blocks keep their cache entry and stay findable until the space is needed: blocks
without a cache entry are reused first, then cached ones are evicted least recently freed
first. A sequence frees its blocks last-to-first, so its leaves are evicted before the
shared prefix they hang from.
"""

from __future__ import annotations

from collections import OrderedDict

from reference_engine.request import Sequence

ROOT_HASH = 0x9E3779B97F4A7C15  # parent hash of a sequence's first block


class PoolError(RuntimeError):
    """Misuse of the pool (double free, freeing an unallocated block); always a bug."""


class InvariantError(AssertionError):
    """check_invariants() found the pool in an inconsistent state."""


def block_hash(parent: int, tokens: tuple[int, ...]) -> int:
    # Python's hash of a tuple of ints is deterministic across processes (no hash seed for
    # ints); collisions are harmless because hits compare the stored key.
    return hash((parent, tokens))


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"num_blocks and block_size must be positive, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self._key: list[tuple[int, tuple[int, ...]] | None] = [None] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}  # block hash -> block id
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # uncached, ref 0 (stack)
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, ref 0, LRU first

    # ---- counts ---------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free) + len(self._evictable)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def usage(self) -> float:
        return self.num_used_blocks / self.num_blocks

    # ---- block-level operations -----------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """Take n blocks (ref count 1 each); all or nothing. Caller owns the references."""
        if n > self.num_free_blocks:
            raise PoolError(f"asked for {n} blocks, {self.num_free_blocks} free")
        out: list[int] = []
        for _ in range(n):
            if self._free:
                b = self._free.pop()
            else:
                b, _ = self._evictable.popitem(last=False)
                self._uncache(b)
            self.ref_cnt[b] = 1
            out.append(b)
        return out

    def touch(self, blocks: list[int]) -> None:
        """Take one more reference on each block (prefix-cache hits)."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self._evictable[b]  # a cached block with no owner is always evictable
            self.ref_cnt[b] += 1

    def free(self, blocks: list[int]) -> None:
        """Drop one reference on each block, last to first so leaves are evicted first."""
        for b in blocks:
            if self.ref_cnt[b] <= 0:
                raise PoolError(f"block {b} freed with ref count {self.ref_cnt[b]} (double free)")
        for b in reversed(blocks):
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                if self._hash[b] is not None:
                    self._evictable[b] = None
                else:
                    self._free.append(b)

    def cache(self, b: int, parent: int, tokens: tuple[int, ...], h: int | None = None) -> int:
        """Register a full, computed block under its chained hash; returns the hash.

        If an identical block is already cached (two sequences computed the same prefix at
        once), this one stays uncached and is simply reused when freed.
        """
        if h is None:
            h = block_hash(parent, tokens)
        if self.enable_caching and h not in self._cached and self._hash[b] is None:
            self._cached[h] = b
            self._hash[b] = h
            self._key[b] = (parent, tokens)
        return h

    def lookup(self, token_ids: list[int], known_hashes: list[int]) -> tuple[list[int], list[int]]:
        """Cached blocks serving a prefix of token_ids, never covering its last token.

        Returns (hit blocks, chained hashes of the walked blocks). `known_hashes` are the
        sequence's hashes already computed (reused instead of rehashing).
        """
        bs = self.block_size
        hits: list[int] = []
        hashes: list[int] = []
        if not self.enable_caching:
            return hits, hashes
        parent = ROOT_HASH
        for i in range((len(token_ids) - 1) // bs):
            tokens = tuple(token_ids[i * bs:(i + 1) * bs])
            h = known_hashes[i] if i < len(known_hashes) else block_hash(parent, tokens)
            hashes.append(h)
            b = self._cached.get(h)
            if b is None or self._key[b] != (parent, tokens):
                break
            hits.append(b)
            parent = h
        return hits, hashes

    def _uncache(self, b: int) -> None:
        h = self._hash[b]
        if h is not None:
            del self._cached[h]
            self._hash[b] = None
            self._key[b] = None

    # ---- checking -------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise InvariantError if the pool is inconsistent. O(num_blocks): for tests."""
        def fail(msg: str) -> None:
            raise InvariantError(msg)

        free_set = set(self._free)
        if len(free_set) != len(self._free):
            fail("a block appears twice in the free list")
        if free_set & self._evictable.keys():
            fail("a block is both free and evictable")
        for b, r in enumerate(self.ref_cnt):
            if r < 0:
                fail(f"block {b} has ref count {r}")
            if r == 0 and b not in free_set and b not in self._evictable:
                fail(f"block {b} has no owner and is not free (leaked)")
            if r > 0 and (b in free_set or b in self._evictable):
                fail(f"block {b} is in use (ref {r}) and on a free list")
            h = self._hash[b]
            if h is not None and self._cached.get(h) != b:
                fail(f"block {b} has hash {h} but the cache maps it elsewhere")
        for b in self._free:
            if self._hash[b] is not None:
                fail(f"free block {b} still carries a cache entry")
        for b in self._evictable:
            if self._hash[b] is None:
                fail(f"evictable block {b} has no cache entry")
        for h, b in self._cached.items():
            if self._hash[b] != h or self._key[b] is None:
                fail(f"cache entry {h} -> block {b} does not match the block")
        if self.num_used_blocks + self.num_free_blocks != self.num_blocks:
            fail("pool not conserved")
        if sum(1 for r in self.ref_cnt if r > 0) != self.num_used_blocks:
            fail("used-block count disagrees with ref counts")


class KVCacheManager:
    """A sequence's view of the pool: reserve its prompt, grow it, cache it, free it."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_size = pool.block_size

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def try_admit(self, seq: Sequence, max_new_tokens: int | None = None) -> bool:
        """Reserve KV for all of seq.token_ids, reusing cached prefix blocks.

        With max_new_tokens, also refuse when more than that many tokens are left to compute
        after the cache hits (prefill that must run in one step). On success the sequence owns one reference on every block of its table and
        `num_computed_tokens` covers the cache hits. On failure nothing changes.
        """
        pool = self.pool
        hits, hashes = pool.lookup(seq.token_ids, seq.block_hashes)
        if len(hashes) > len(seq.block_hashes):
            seq.block_hashes.extend(hashes[len(seq.block_hashes):])
        if max_new_tokens is not None and len(seq.token_ids) - len(hits) * self.block_size > max_new_tokens:
            return False
        need = self.blocks_needed(len(seq.token_ids)) - len(hits)
        hits_not_owned = sum(1 for b in hits if pool.ref_cnt[b] == 0)
        if need > pool.num_free_blocks - hits_not_owned:
            return False
        pool.touch(hits)  # before allocate, so allocation cannot evict our own hits
        seq.block_table = hits + pool.allocate(need)
        seq.num_computed_tokens = len(hits) * self.block_size
        seq.num_registered_blocks = len(hits)
        return True

    def try_grow(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Make the table cover num_computed_tokens + num_new_tokens; False if the pool is dry."""
        need = self.blocks_needed(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if need <= 0:
            return True
        if need > self.pool.num_free_blocks:
            return False
        seq.block_table.extend(self.pool.allocate(need))
        return True

    def release_tail(self, seq: Sequence, num_tokens: int) -> None:
        """Give back the blocks past the first num_tokens (slots of rejected drafts)."""
        keep = self.blocks_needed(num_tokens)
        if len(seq.block_table) > keep:
            tail, seq.block_table = seq.block_table[keep:], seq.block_table[:keep]
            self.pool.free(tail)

    def mark_computed(self, seq: Sequence, num_tokens: int) -> None:
        """Advance the sequence and register every block that just became full."""
        seq.num_computed_tokens += num_tokens
        self.register_full_blocks(seq)

    def register_full_blocks(self, seq: Sequence) -> None:
        """Offer the sequence's computed, full, not yet offered blocks to the prefix cache."""
        if not self.pool.enable_caching:
            return
        bs = self.block_size
        hashes = seq.block_hashes
        toks = seq.token_ids
        for i in range(seq.num_registered_blocks, seq.num_computed_tokens // bs):
            parent = hashes[i - 1] if i else ROOT_HASH
            tokens = tuple(toks[i * bs:(i + 1) * bs])
            h = self.pool.cache(seq.block_table[i], parent, tokens,
                                hashes[i] if i < len(hashes) else None)
            if i == len(hashes):
                hashes.append(h)
        seq.num_registered_blocks = max(seq.num_registered_blocks, seq.num_computed_tokens // bs)

    def free(self, seq: Sequence) -> None:
        """Release the sequence's references exactly once; its table becomes empty."""
        table, seq.block_table = seq.block_table, []
        seq.num_registered_blocks = 0
        self.pool.free(table)
