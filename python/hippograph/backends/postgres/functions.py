"""The server-side functions of the graph schema, one text per migration that (re)defines them.

Each is SQL run by a migration (`schema._MIGRATIONS`); `{s}` stands for the quoted schema name.
A migration replaces a function whole, so a schema at any version runs the latest text.
"""

from __future__ import annotations

from typing import Final

_WRITE_GRAPH: Final = """CREATE FUNCTION {s}.write_graph(
    p_repo text, p_claim_key bytea, p_claim_record bytea, p_token bytea, p_stored_at timestamptz,
    p_dim integer,
    p_node_keys bytea[], p_types text[], p_records bytea[], p_created timestamptz[],
    p_emb_keys bytea[], p_vecs bytea[], p_bare bytea[],
    p_link_a bytea[], p_link_edge text[], p_link_b bytea[],
    p_meta_keys bytea[], p_meta_records bytea[], p_touched bytea[],
    OUT claimed boolean, OUT stored_dim integer, OUT seq bigint
) LANGUAGE plpgsql AS $fn$
BEGIN
    claimed := true;
    IF p_claim_key IS NOT NULL THEN
        INSERT INTO {s}.ingestion (repo, source_id, record, token, stored_at)
        VALUES (p_repo, p_claim_key, p_claim_record, p_token, p_stored_at)
        ON CONFLICT (repo, source_id) DO NOTHING;
        IF NOT FOUND THEN
            claimed := false;
            RETURN;
        END IF;
    END IF;
    SELECT r.dim INTO stored_dim FROM {s}.repos r WHERE r.repo = p_repo;
    IF p_dim IS NOT NULL THEN
        IF stored_dim IS NULL THEN
            INSERT INTO {s}.repos (repo, dim) VALUES (p_repo, p_dim) ON CONFLICT (repo)
            DO UPDATE SET dim = COALESCE({s}.repos.dim, EXCLUDED.dim) RETURNING dim INTO stored_dim;
        END IF;
        IF stored_dim <> p_dim THEN
            RAISE EXCEPTION 'the store holds dimension %', stored_dim
                USING ERRCODE = 'HG001', DETAIL = stored_dim::text;
        END IF;
    END IF;
    IF cardinality(p_node_keys) > 0 THEN
        DELETE FROM {s}.links WHERE repo = p_repo AND a = ANY(p_node_keys);
        DELETE FROM {s}.links WHERE b = ANY(p_node_keys) AND repo = p_repo AND NOT a = ANY(p_node_keys);
        INSERT INTO {s}.nodes (repo, id, type, record, created_at)
        SELECT p_repo, x.id, x.type, x.record, x.created_at
        FROM unnest(p_node_keys, p_types, p_records, p_created) AS x(id, type, record, created_at)
        ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, record = EXCLUDED.record,
            created_at = EXCLUDED.created_at;
        IF cardinality(p_bare) > 0 THEN
            DELETE FROM {s}.embeddings WHERE repo = p_repo AND id = ANY(p_bare);
        END IF;
        INSERT INTO {s}.embeddings (repo, id, vec)
        SELECT p_repo, x.id, x.vec FROM unnest(p_emb_keys, p_vecs) AS x(id, vec)
        ON CONFLICT (repo, id) DO UPDATE SET vec = EXCLUDED.vec;
    END IF;
    IF cardinality(p_link_a) > 0 THEN
        INSERT INTO {s}.links (repo, a, edge, b) SELECT p_repo, x.a, x.edge, x.b
        FROM unnest(p_link_a, p_link_edge, p_link_b) AS x(a, edge, b)
        WHERE EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.a)
        AND EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.b)
        ORDER BY x.a, x.edge, x.b ON CONFLICT DO NOTHING;
    END IF;
    IF cardinality(p_meta_keys) > 0 THEN
        INSERT INTO {s}.metadata (repo, id, record)
        SELECT p_repo, x.id, x.record FROM unnest(p_meta_keys, p_meta_records) AS x(id, record)
        ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record;
    END IF;
    IF cardinality(p_touched) > 0 THEN
        INSERT INTO {s}.changes (repo, ids) VALUES (p_repo, p_touched) RETURNING changes.seq INTO seq;
    END IF;
END
$fn$"""
"""One graph write in one statement, so a call costs one round trip: the ingestion claim (none
when `p_claim_key` is NULL; not claimed: nothing written), the dimension fixed or checked (SQLSTATE
HG001, the stored dimension as DETAIL, when it differs), then the `apply_changeset` order: links of
the nodes put dropped, nodes, embeddings, links whose two ends exist, metadata, and the change-log
row naming `p_touched` (none when empty: the caller logs). Arrays are sorted by key by the caller
(one lock order for every writer)."""

_WRITE_GRAPH_5: Final = """CREATE FUNCTION {s}.write_graph(
    p_repo text, p_claim_key bytea, p_claim_record bytea, p_token bytea, p_stored_at timestamptz,
    p_dim integer,
    p_node_keys bytea[], p_types text[], p_records bytea[], p_created timestamptz[],
    p_emb_keys bytea[], p_vecs bytea[], p_bare bytea[],
    p_link_a bytea[], p_link_edge text[], p_link_b bytea[],
    p_meta_keys bytea[], p_meta_records bytea[], p_touched bytea[], p_flat real[], p_usage float8[],
    OUT claimed boolean, OUT stored_dim integer, OUT seq bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
    v_kept boolean;
BEGIN
    -- Taken as the writes below take them anyway, first: a write that waited for `vectors.enable`
    -- (SHARE ROW EXCLUSIVE on the three) sees the table it created.
    LOCK TABLE {s}.nodes, {s}.embeddings, {s}.metadata IN ROW EXCLUSIVE MODE;
    v_kept := to_regclass('{s}.vectors') IS NOT NULL;
    claimed := true;
    IF v_kept AND ((p_flat IS NULL AND cardinality(p_emb_keys) > 0)
                   OR (p_usage IS NULL AND cardinality(p_meta_keys) > 0)) THEN
        RAISE EXCEPTION 'this schema keeps vectors in the server: send them' USING ERRCODE = 'HG002';
    END IF;
    IF p_claim_key IS NOT NULL THEN
        INSERT INTO {s}.ingestion (repo, source_id, record, token, stored_at)
        VALUES (p_repo, p_claim_key, p_claim_record, p_token, p_stored_at)
        ON CONFLICT (repo, source_id) DO NOTHING;
        IF NOT FOUND THEN
            claimed := false;
            RETURN;
        END IF;
    END IF;
    SELECT r.dim INTO stored_dim FROM {s}.repos r WHERE r.repo = p_repo;
    IF p_dim IS NOT NULL THEN
        IF stored_dim IS NULL THEN
            INSERT INTO {s}.repos (repo, dim) VALUES (p_repo, p_dim) ON CONFLICT (repo)
            DO UPDATE SET dim = COALESCE({s}.repos.dim, EXCLUDED.dim) RETURNING dim INTO stored_dim;
        END IF;
        IF stored_dim <> p_dim THEN
            RAISE EXCEPTION 'the store holds dimension %', stored_dim
                USING ERRCODE = 'HG001', DETAIL = stored_dim::text;
        END IF;
    END IF;
    IF cardinality(p_node_keys) > 0 THEN
        DELETE FROM {s}.links WHERE repo = p_repo AND a = ANY(p_node_keys);
        DELETE FROM {s}.links WHERE b = ANY(p_node_keys) AND repo = p_repo AND NOT a = ANY(p_node_keys);
        INSERT INTO {s}.nodes (repo, id, type, record, created_at)
        SELECT p_repo, x.id, x.type, x.record, x.created_at
        FROM unnest(p_node_keys, p_types, p_records, p_created) AS x(id, type, record, created_at)
        ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, record = EXCLUDED.record,
            created_at = EXCLUDED.created_at;
        IF cardinality(p_bare) > 0 THEN
            DELETE FROM {s}.embeddings WHERE repo = p_repo AND id = ANY(p_bare);
        END IF;
        INSERT INTO {s}.embeddings (repo, id, vec)
        SELECT p_repo, x.id, x.vec FROM unnest(p_emb_keys, p_vecs) AS x(id, vec)
        ON CONFLICT (repo, id) DO UPDATE SET vec = EXCLUDED.vec;
        IF v_kept THEN
            IF cardinality(p_bare) > 0 THEN
                DELETE FROM {s}.vectors WHERE repo = p_repo AND id = ANY(p_bare);
            END IF;
            INSERT INTO {s}.vectors (repo, id, type, vec)
            SELECT p_repo, x.id, n.type, p_flat[(x.o - 1) * p_dim + 1 : x.o * p_dim]
            FROM unnest(p_emb_keys) WITH ORDINALITY AS x(id, o)
            JOIN {s}.nodes n ON n.repo = p_repo AND n.id = x.id
            ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, vec = EXCLUDED.vec;
        END IF;
    END IF;
    IF cardinality(p_link_a) > 0 THEN
        INSERT INTO {s}.links (repo, a, edge, b) SELECT p_repo, x.a, x.edge, x.b
        FROM unnest(p_link_a, p_link_edge, p_link_b) AS x(a, edge, b)
        WHERE EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.a)
        AND EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.b)
        ORDER BY x.a, x.edge, x.b ON CONFLICT DO NOTHING;
    END IF;
    IF cardinality(p_meta_keys) > 0 AND v_kept THEN
        INSERT INTO {s}.metadata (repo, id, record, ts, accesses, reward_count, reward_sum)
        SELECT p_repo, x.id, x.record, p_usage[4 * x.o - 3], p_usage[4 * x.o - 2], p_usage[4 * x.o - 1],
            p_usage[4 * x.o]
        FROM unnest(p_meta_keys, p_meta_records) WITH ORDINALITY AS x(id, record, o)
        ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record, ts = EXCLUDED.ts,
            accesses = EXCLUDED.accesses, reward_count = EXCLUDED.reward_count, reward_sum = EXCLUDED.reward_sum;
    ELSIF cardinality(p_meta_keys) > 0 THEN
        INSERT INTO {s}.metadata (repo, id, record)
        SELECT p_repo, x.id, x.record FROM unnest(p_meta_keys, p_meta_records) AS x(id, record)
        ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record;
    END IF;
    IF cardinality(p_touched) > 0 THEN
        INSERT INTO {s}.changes (repo, ids) VALUES (p_repo, p_touched) RETURNING changes.seq INTO seq;
    END IF;
END
$fn$"""
"""`write_graph` as migration 5 redefines it: the same steps, and where the schema keeps vectors in
the server (``{s}.vectors``, `vectors.enable`), the embedded nodes' vectors too, taken from
`p_flat` (all of the write's embeddings, one after another) by pgvector's cast from ``real[]``,
and the default value function's usage columns of each metadata record written (`p_usage`: four
per record, as `codec.usage_of_meta` reads them) on its metadata row. A caller
that sends neither while the table exists is refused with SQLSTATE HG002 and retries with them, so
no writer can leave a vector or its usage out, whenever the table was created."""


def _rewritten(text: str, *edits: tuple[str, str]) -> str:
    """`text` with each (old, new) replaced, every old required to be there."""
    for old, new in edits:
        if old not in text:
            raise AssertionError(f"not in the statement: {old!r}")
        text = text.replace(old, new)
    return text


_WRITE_GRAPH_6: Final = _rewritten(
    _WRITE_GRAPH_5,
    ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
    (
        "WHERE EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.a)\n"
        "        AND EXISTS (SELECT 1 FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.b)",
        "WHERE (SELECT true FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.a)\n"
        "        AND (SELECT true FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = x.b)",
    ),
    (
        "SELECT p_repo, x.id, n.type, p_flat[(x.o - 1) * p_dim + 1 : x.o * p_dim]\n"
        "            FROM unnest(p_emb_keys) WITH ORDINALITY AS x(id, o)\n"
        "            JOIN {s}.nodes n ON n.repo = p_repo AND n.id = x.id",
        "SELECT p_repo, x.id, n.type, p_flat[(x.o - 1) * p_dim + 1 : x.o * p_dim]\n"
        "            FROM unnest(p_emb_keys) WITH ORDINALITY AS x(id, o)\n"
        "            JOIN unnest(p_node_keys, p_types) AS n(id, type) ON n.id = x.id",
    ),
)
"""`write_graph` as migration 6 redefines it: the same steps, planned as key lookups at any size.
Each end of a link is checked by a scalar subquery, which the planner cannot turn into a join (an
`EXISTS` became a hash join over a sequential scan of the repo's nodes once the statement's generic
plan was cached); a vector takes its type from the write's own arrays rather than from `nodes`."""

_WRITE_GRAPH_TEMPLATE: Final = """CREATE OR REPLACE FUNCTION {s}.<name>(
    p_repo text, p_claim_key bytea, p_claim_record bytea, p_token bytea, p_stored_at timestamptz,
    p_dim integer,
    p_node_keys bytea[], p_types text[], p_records bytea[], p_created timestamptz[],
    p_emb_keys bytea[], p_vecs bytea[], p_bare bytea[],
    p_link_a bytea[], p_link_edge text[], p_link_b bytea[],
    p_meta_keys bytea[], p_meta_records bytea[], p_touched bytea[], p_flat real[], p_usage float8[],
    OUT claimed boolean, OUT stored_dim integer, OUT seq bigint
) LANGUAGE plpgsql<settings> AS $fn$
DECLARE
    v_kept boolean;
    v_old bytea[] := '{}';
    v_out bytea[];
    v_ends bytea[] := '{}';
BEGIN
<dispatch>    -- Taken as the writes below take them anyway, first: a write that waited for `vectors.enable`
    -- (SHARE ROW EXCLUSIVE on the three) sees the table it created.
    LOCK TABLE {s}.nodes, {s}.embeddings, {s}.metadata IN ROW EXCLUSIVE MODE;
    v_kept := to_regclass('{s}.vectors') IS NOT NULL;
    claimed := true;
    IF v_kept AND ((p_flat IS NULL AND cardinality(p_emb_keys) > 0)
                   OR (p_usage IS NULL AND cardinality(p_meta_keys) > 0)) THEN
        RAISE EXCEPTION 'this schema keeps vectors in the server: send them' USING ERRCODE = 'HG002';
    END IF;
    IF p_claim_key IS NOT NULL THEN
        INSERT INTO {s}.ingestion (repo, source_id, record, token, stored_at)
        VALUES (p_repo, p_claim_key, p_claim_record, p_token, p_stored_at)
        ON CONFLICT (repo, source_id) DO NOTHING;
        IF NOT FOUND THEN
            claimed := false;
            RETURN;
        END IF;
    END IF;
    SELECT r.dim INTO stored_dim FROM {s}.repos r WHERE r.repo = p_repo;
    IF p_dim IS NOT NULL THEN
        IF stored_dim IS NULL THEN
            INSERT INTO {s}.repos (repo, dim) VALUES (p_repo, p_dim) ON CONFLICT (repo)
            DO UPDATE SET dim = COALESCE({s}.repos.dim, EXCLUDED.dim) RETURNING dim INTO stored_dim;
        END IF;
        IF stored_dim <> p_dim THEN
            RAISE EXCEPTION 'the store holds dimension %', stored_dim
                USING ERRCODE = 'HG001', DETAIL = stored_dim::text;
        END IF;
    END IF;
    IF cardinality(p_node_keys) > 0 THEN
        v_old := ARRAY(SELECT n.id FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = ANY(p_node_keys)
                       ORDER BY n.id FOR NO KEY UPDATE);
        INSERT INTO {s}.nodes (repo, id, type, record, created_at)
        SELECT p_repo, x.id, x.type, x.record, x.created_at
        FROM unnest(p_node_keys, p_types, p_records, p_created) AS x(id, type, record, created_at)
        WHERE x.id <> ALL(v_old);
        INSERT INTO {s}.embeddings (repo, id, vec)
        SELECT p_repo, x.id, x.vec FROM unnest(p_emb_keys, p_vecs) AS x(id, vec) WHERE x.id <> ALL(v_old);
        IF cardinality(v_old) > 0 THEN
            UPDATE {s}.nodes n SET type = x.type, record = x.record, created_at = x.created_at
            FROM unnest(p_node_keys, p_types, p_records, p_created) AS x(id, type, record, created_at)
            WHERE n.repo = p_repo AND n.id = x.id AND x.id = ANY(v_old);
            WITH outgoing AS (DELETE FROM {s}.links WHERE repo = p_repo AND a = ANY(v_old))
            DELETE FROM {s}.links WHERE b = ANY(v_old) AND repo = p_repo AND NOT a = ANY(v_old);
            DELETE FROM {s}.embeddings WHERE repo = p_repo AND id = ANY(p_bare) AND id = ANY(v_old);
            INSERT INTO {s}.embeddings (repo, id, vec)
            SELECT p_repo, x.id, x.vec FROM unnest(p_emb_keys, p_vecs) AS x(id, vec) WHERE x.id = ANY(v_old)
            ON CONFLICT (repo, id) DO UPDATE SET vec = EXCLUDED.vec;
        END IF;
        IF v_kept THEN
            IF cardinality(p_bare) > 0 THEN
                DELETE FROM {s}.vectors WHERE repo = p_repo AND id = ANY(p_bare);
            END IF;
            INSERT INTO {s}.vectors (repo, id, type, vec)
            SELECT p_repo, x.id, n.type, p_flat[(x.o - 1) * p_dim + 1 : x.o * p_dim]
            FROM unnest(p_emb_keys) WITH ORDINALITY AS x(id, o)
            JOIN unnest(p_node_keys, p_types) AS n(id, type) ON n.id = x.id
            ON CONFLICT (repo, id) DO UPDATE SET type = EXCLUDED.type, vec = EXCLUDED.vec;
        END IF;
    END IF;
    IF cardinality(p_link_a) > 0 THEN
        v_out := ARRAY(SELECT DISTINCT e FROM unnest(p_link_a || p_link_b) AS e WHERE e <> ALL(p_node_keys));
        IF cardinality(v_out) > 0 THEN
            v_ends := ARRAY(SELECT n.id FROM {s}.nodes n WHERE n.repo = p_repo AND n.id = ANY(v_out)
                            ORDER BY n.id FOR KEY SHARE);
        END IF;
        INSERT INTO {s}.links (repo, a, edge, b) SELECT p_repo, x.a, x.edge, x.b
        FROM unnest(p_link_a, p_link_edge, p_link_b) AS x(a, edge, b)
        WHERE (x.a = ANY(p_node_keys) AND (x.b = ANY(p_node_keys) OR x.b = ANY(v_ends)))
            OR (x.b = ANY(p_node_keys) AND x.a = ANY(v_ends))
        ORDER BY x.a, x.edge, x.b;
        IF cardinality(v_ends) > 1 THEN
            INSERT INTO {s}.links (repo, a, edge, b) SELECT p_repo, x.a, x.edge, x.b
            FROM unnest(p_link_a, p_link_edge, p_link_b) AS x(a, edge, b)
            WHERE x.a = ANY(v_ends) AND x.b = ANY(v_ends)
            ORDER BY x.a, x.edge, x.b ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    IF cardinality(p_meta_keys) > 0 AND v_kept THEN
        INSERT INTO {s}.metadata (repo, id, record, ts, accesses, reward_count, reward_sum)
        SELECT p_repo, x.id, x.record, p_usage[4 * x.o - 3], p_usage[4 * x.o - 2], p_usage[4 * x.o - 1],
            p_usage[4 * x.o]
        FROM unnest(p_meta_keys, p_meta_records) WITH ORDINALITY AS x(id, record, o)
        ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record, ts = EXCLUDED.ts,
            accesses = EXCLUDED.accesses, reward_count = EXCLUDED.reward_count, reward_sum = EXCLUDED.reward_sum;
    ELSIF cardinality(p_meta_keys) > 0 THEN
        INSERT INTO {s}.metadata (repo, id, record)
        SELECT p_repo, x.id, x.record FROM unnest(p_meta_keys, p_meta_records) AS x(id, record)
        ON CONFLICT (repo, id) DO UPDATE SET record = EXCLUDED.record;
    END IF;
    IF cardinality(p_touched) > 0 THEN
        INSERT INTO {s}.changes (repo, ids) VALUES (p_repo, p_touched) RETURNING changes.seq INTO seq;
    END IF;
END
$fn$"""

_LARGE_WRITE: Final = 64
"""Nodes plus link rows above which `write_graph` runs as `write_graph_rows`."""

_WRITE_GRAPH_7: Final = (
    _WRITE_GRAPH_TEMPLATE.replace("<name>", "write_graph_rows")
    .replace("<settings>", " SET plan_cache_mode = force_custom_plan")
    .replace("<dispatch>", ""),
    _WRITE_GRAPH_TEMPLATE.replace("<name>", "write_graph")
    .replace("<settings>", "")
    .replace(
        "<dispatch>",
        f"    IF cardinality(p_node_keys) + cardinality(p_link_a) > {_LARGE_WRITE} THEN\n"
        "        SELECT w.claimed, w.stored_dim, w.seq INTO claimed, stored_dim, seq\n"
        "        FROM {s}.write_graph_rows(p_repo, p_claim_key, p_claim_record, p_token, p_stored_at, p_dim,\n"
        "            p_node_keys, p_types, p_records, p_created, p_emb_keys, p_vecs, p_bare, p_link_a, p_link_edge,\n"
        "            p_link_b, p_meta_keys, p_meta_records, p_touched, p_flat, p_usage) w;\n"
        "        RETURN;\n"
        "    END IF;\n",
    ),
)
"""`write_graph` as migration 7 redefines it: the same steps, with plain inserts where nothing can
be in the way, and links no longer checked by foreign keys (a check per row and end, and a
speculative insertion per row, were most of an ingestion's server time).

The write's nodes that exist are locked first (``FOR NO KEY UPDATE``, held to commit), so a writer
putting or deleting one of them waits. Only those are updated, have their links dropped and their
embeddings replaced; the others are inserted, and so are their embeddings and every link that
touches a node of the write: nothing else can hold those keys (a writer inserting the same new node
meanwhile makes this one fail with a unique violation, which is retried). A link end outside the
write is kept only if that node exists, read with a ``KEY SHARE`` lock held to commit: its deleter
waits, and its `drop_node_rows` trigger then sees the new link. An ingestion, whose nodes are new
and whose links join them, locks and drops nothing.

A large write (more than `_LARGE_WRITE` nodes and link rows) runs the same steps as
`write_graph_rows`, whose statements are planned for each call: a plan PL/pgSQL caches for any
arrays tests membership in them (``= ANY``, ``<> ALL``) element by element, quadratic in the write's
size, where a plan for the arrays at hand hashes them. Planning costs more than a small write's
work, so small writes keep the cached plans."""

_NODE_ROWS: Final = (
    """CREATE OR REPLACE FUNCTION {s}.drop_node_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'nodes are deleted in READ COMMITTED transactions only, this one is %',
            current_setting('transaction_isolation') USING ERRCODE = 'HG003';
    END IF;
    FOR r IN SELECT g.repo, array_agg(g.id) AS ids FROM gone g GROUP BY g.repo LOOP
        DELETE FROM {s}.embeddings WHERE repo = r.repo AND id = ANY(r.ids);
        DELETE FROM {s}.links WHERE repo = r.repo AND a = ANY(r.ids);
        DELETE FROM {s}.links WHERE b = ANY(r.ids) AND repo = r.repo;
    END LOOP;
    RETURN NULL;
END
$fn$""",
    "DROP TRIGGER IF EXISTS nodes_drop_rows ON {s}.nodes",
    "CREATE TRIGGER nodes_drop_rows AFTER DELETE ON {s}.nodes REFERENCING OLD TABLE AS gone "
    "FOR EACH STATEMENT EXECUTE FUNCTION {s}.drop_node_rows()",
    """DO $do$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint
             WHERE conrelid IN ('{s}.links'::regclass, '{s}.embeddings'::regclass)
             AND confrelid = '{s}.nodes'::regclass AND contype = 'f' LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tab, c.conname);
    END LOOP;
END
$do$""",
)
"""Migration 7: the embeddings and links of deleted nodes are deleted by a statement-level
trigger, where foreign keys with ``ON DELETE CASCADE`` did (whose checks cost every inserted row an
index probe and a trigger call per reference). The trigger's deletes are statements of their own, so
under READ COMMITTED they see rows committed while the node's deleter waited for its lock (the
writers of those rows hold it: `_WRITE_GRAPH_7`). Every writer, of any release, deletes nodes
through it. A deleting transaction at another isolation level is refused (SQLSTATE HG003): its
snapshot could miss a link committed while it waited, which would outlive the node."""
