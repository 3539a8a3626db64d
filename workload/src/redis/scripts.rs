//! FlashSale's Lua scripts, compiled into the binary from `lua/`. Each runs by
//! SHA (`EVALSHA`) and is loaded again when a server answers `NOSCRIPT` (a
//! restarted node, a failover): [`redis::Script`] does both.

use std::sync::LazyLock;

use redis::Script;

/// The scripts, hashed once per process.
pub struct Scripts {
    /// `lua/purchase.lua`: the atomic purchase decision in one shard.
    pub purchase: Script,
    /// `lua/release.lua`: gives a reservation's units back, exactly once.
    pub release: Script,
    /// `lua/claim.lua`: a consumer claims a reservation before persisting it.
    pub claim: Script,
    /// `lua/transfer_out.lua`: takes stock out of a donor shard.
    pub transfer_out: Script,
    /// `lua/transfer_in.lua`: credits a transfer to the receiving shard, once.
    pub transfer_in: Script,
    /// `lua/restock.lua`: records a stock change once per generation.
    pub restock: Script,
    /// `lua/withdraw.lua`: a shrink takes units out of a shard (or gives them back).
    pub withdraw: Script,
    /// `lua/warm.lua`: loads one shard once per incarnation.
    pub warm: Script,
    /// `lua/probe.lua`: what a sold-out decision reads from a shard.
    pub probe: Script,
    /// `lua/stale.lua`: the old members of a time-scored set.
    pub stale: Script,
    /// `lua/fence.lua`: marks a shard of a lost state so it sells nothing.
    pub fence: Script,
    /// `lua/meta.lua`: the sale's metadata into a shard that holds it.
    pub meta: Script,
    /// `lua/pause.lua`: the kill switch of one shard.
    pub pause: Script,
    /// `lua/confirm.lua`: the broker acknowledged reservations' messages.
    pub confirm: Script,
    /// `lua/queue.lua`: a shopper's place in a sale's admission queue.
    pub queue: Script,
}

/// The process-wide scripts.
pub static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    purchase: Script::new(include_str!("../../../lua/purchase.lua")),
    release: Script::new(include_str!("../../../lua/release.lua")),
    claim: Script::new(include_str!("../../../lua/claim.lua")),
    transfer_out: Script::new(include_str!("../../../lua/transfer_out.lua")),
    transfer_in: Script::new(include_str!("../../../lua/transfer_in.lua")),
    restock: Script::new(include_str!("../../../lua/restock.lua")),
    withdraw: Script::new(include_str!("../../../lua/withdraw.lua")),
    warm: Script::new(include_str!("../../../lua/warm.lua")),
    probe: Script::new(include_str!("../../../lua/probe.lua")),
    stale: Script::new(include_str!("../../../lua/stale.lua")),
    fence: Script::new(include_str!("../../../lua/fence.lua")),
    meta: Script::new(include_str!("../../../lua/meta.lua")),
    pause: Script::new(include_str!("../../../lua/pause.lua")),
    confirm: Script::new(include_str!("../../../lua/confirm.lua")),
    queue: Script::new(include_str!("../../../lua/queue.lua")),
});
