//! Pure decisions from the model and what was observed: the plan, scaling, conditions, degradation while Redis is down, throttle, owned objects, the queue's figures, and whether a watched sale's reading wakes it.

pub mod conditions;
pub mod degradation;
pub mod deletion;
pub mod plan;
pub mod queue;
pub mod resources;
pub mod scaling;
pub mod throttle;
pub mod wake;
