pub mod external;
pub mod moto;
pub mod roles;
