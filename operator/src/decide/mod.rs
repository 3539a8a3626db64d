//! Pure decisions from the model and what was observed: the plan, scaling, conditions, throttle, owned objects.

pub mod conditions;
pub mod deletion;
pub mod plan;
pub mod resources;
pub mod scaling;
pub mod throttle;
