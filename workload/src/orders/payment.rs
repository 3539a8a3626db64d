//! The `payments` table: a shopper starts a payment, the provider's callback
//! settles it (the decision is `domain::payment::settle`).

use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::order::{OrderEvent, OrderStatus, Transition};
use crate::domain::payment::{PaymentOutcome, PaymentState, Settlement, settle};

/// What starting a payment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// A payment in flight for the UNPAID order: a new one, or the one a
    /// previous start opened.
    Started(Uuid),
    /// The order is PAID, by this payment.
    AlreadyPaid(Uuid),
    /// The order cannot be paid in this status.
    Illegal(OrderStatus),
    /// No persisted order of this shopper has this id.
    NotFound,
}

/// Opens a payment for the shopper's UNPAID order (one in flight per order:
/// a retry gets the same id).
pub async fn start(db: &PgPool, order_id: Uuid, shopper: &str) -> sqlx::Result<Start> {
    let mut tx = db.begin().await?;
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM orders WHERE id = $1 AND shopper = $2 FOR UPDATE")
            .bind(order_id)
            .bind(shopper)
            .fetch_optional(&mut *tx)
            .await?;
    let Some(status) = status else {
        return Ok(Start::NotFound);
    };
    let status = OrderStatus::parse(&status).unwrap_or(OrderStatus::Failed);
    let in_state = |state: PaymentState| {
        sqlx::query_scalar::<_, Uuid>(
            "SELECT id FROM payments WHERE order_id = $1 AND state = $2
             ORDER BY started_at DESC LIMIT 1",
        )
        .bind(order_id)
        .bind(state.as_str())
    };
    let found = match status.on(OrderEvent::Pay) {
        Transition::To(_) => match in_state(PaymentState::Started)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(id) => Start::Started(id),
            None => {
                let id = Uuid::now_v7();
                sqlx::query("INSERT INTO payments (id, order_id) VALUES ($1, $2)")
                    .bind(id)
                    .bind(order_id)
                    .execute(&mut *tx)
                    .await?;
                Start::Started(id)
            }
        },
        Transition::AlreadyDone => match in_state(PaymentState::Succeeded)
            .fetch_optional(&mut *tx)
            .await?
        {
            Some(id) => Start::AlreadyPaid(id),
            None => Start::Illegal(status),
        },
        Transition::Illegal | Transition::NotYet => Start::Illegal(status),
    };
    tx.commit().await?;
    Ok(found)
}

/// What a callback did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The decision.
    pub settlement: Settlement,
    /// The payment's state after it.
    pub payment: PaymentState,
    /// The order's status after it.
    pub order: OrderStatus,
}

/// Applies the provider's `outcome` to payment `payment_id` of order
/// `order_id`, under row locks on both. `None`: no such payment of that order.
pub async fn settle_payment(
    db: &PgPool,
    payment_id: Uuid,
    order_id: Uuid,
    outcome: PaymentOutcome,
) -> sqlx::Result<Option<Settled>> {
    let mut tx = db.begin().await?;
    let row: Option<(String, String)> = sqlx::query_as(
        "SELECT p.state, o.status FROM payments p JOIN orders o ON o.id = p.order_id
         WHERE p.id = $1 AND p.order_id = $2 FOR UPDATE OF p, o",
    )
    .bind(payment_id)
    .bind(order_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((state, status)) = row else {
        return Ok(None);
    };
    let state = PaymentState::parse(&state).unwrap_or(PaymentState::Started);
    let order = OrderStatus::parse(&status).unwrap_or(OrderStatus::Failed);
    let settlement = settle(state, order, outcome);
    let (payment, order) = match settlement {
        Settlement::Pay => {
            sqlx::query(
                "UPDATE orders SET status = 'PAID', version = version + 1, updated_at = now()
                 WHERE id = $1 AND status = 'UNPAID'",
            )
            .bind(order_id)
            .execute(&mut *tx)
            .await?;
            (PaymentState::Succeeded, OrderStatus::Paid)
        }
        Settlement::Refund => (PaymentState::RefundDue, order),
        Settlement::Decline => (PaymentState::Failed, order),
        Settlement::Repeat | Settlement::Contradiction => (state, order),
    };
    if payment != state {
        sqlx::query("UPDATE payments SET state = $2, settled_at = now() WHERE id = $1")
            .bind(payment_id)
            .bind(payment.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(Some(Settled {
        settlement,
        payment,
        order,
    }))
}
