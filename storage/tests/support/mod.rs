pub mod moto;
pub mod roles;
