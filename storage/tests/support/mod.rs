pub mod entries;
pub mod moto;
pub mod proxy;
pub mod roles;
